"""Fencing: every write carries the lock's token, and the store refuses a stale one.

worker-a takes the lock, writes, then stalls (a GC pause, a swapped-out process) past its ttl.
worker-b gets the lock with a larger token and writes. When worker-a wakes up and writes as if it
still held the lock, the store refuses it: its token is older than the last one it accepted.

    python3 examples/python/fencing.py      # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import sqlite3
import time
import uuid

from relock import Lock, connect


class Ledger:
    """The protected resource: a database row that remembers the highest token that wrote it."""

    def __init__(self):
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE account (id TEXT PRIMARY KEY, balance INT, fence INT)")
        self.db.execute("INSERT INTO account VALUES ('acct-7', 100, 0)")

    def balance(self) -> int:
        return self.db.execute("SELECT balance FROM account WHERE id = 'acct-7'").fetchone()[0]

    def set_balance(self, balance: int, token: int) -> bool:
        """The write lands only with a token at least as high as every token before it."""
        cursor = self.db.execute(
            "UPDATE account SET balance = ?, fence = ? WHERE id = 'acct-7' AND fence <= ?",
            (balance, token, token))
        return cursor.rowcount == 1


def main() -> None:
    redis = connect()
    ledger = Ledger()
    key = f"account:acct-7:{uuid.uuid4().hex[:8]}"

    a = Lock(redis, key, ttl_ms=200)
    token_a = a.acquire()
    print(f"worker-a: token {token_a}")
    balance = ledger.balance()
    if not ledger.set_balance(balance + 50, token_a):
        raise SystemExit("the ledger refused worker-a's first write")
    print(f"worker-a: write accepted, balance {balance} -> {balance + 50}")

    time.sleep(0.4)  # worker-a stalls for longer than its 200 ms ttl: the lock expires
    print("worker-a: paused 400 ms, longer than its 200 ms ttl")

    b = Lock(redis, key, ttl_ms=10_000)
    token_b = b.wait(5_000)
    if token_b is None:
        raise SystemExit("worker-b did not get the expired lock")
    print(f"worker-b: token {token_b}")
    balance = ledger.balance()
    if not ledger.set_balance(balance + 50, token_b):
        raise SystemExit("the ledger refused worker-b's write")
    print(f"worker-b: write accepted, balance {balance} -> {balance + 50}")

    # worker-a wakes up and carries on as if it still held the lock.
    if ledger.set_balance(1_000_000, token_a):
        raise SystemExit("the ledger accepted a stale write")
    print(f"worker-a: stale write with token {token_a} rejected")
    print(f"worker-a: release -> {a.release()} (it no longer holds the lock)")

    print(f"worker-b: release -> {b.release()}")
    print(f"balance {ledger.balance()}")


if __name__ == "__main__":
    main()
