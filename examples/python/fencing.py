"""Fencing: every write carries the lock's token, and the store refuses a stale one.

worker-a takes the lock, writes, then stalls (a GC pause, a swapped-out process) past its ttl:
nothing of its process runs, not even the renewal thread, and the lock expires. worker-b gets
the lock with a larger token and writes. When worker-a wakes up and writes as if it still held
the lock, the store refuses it: its token is older than the last one it accepted. worker-a's
hold knows it is lost, too (`hold.lost`), but only the token protects a write already on its way.

    python3 examples/python/fencing.py      # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import ctypes
import os
import sqlite3
import sys
import uuid

# scripts/setup-examples installs relock and redis-py into .deps/ beside this file.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".deps"))

import redis  # noqa: E402
import relock  # noqa: E402


class Ledger:
    """The protected resource: a database row that remembers the highest token that wrote it."""

    def __init__(self) -> None:
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


def stall(seconds: float) -> None:
    """Stops every thread of this process for a while, as a long GC pause or a suspended VM
    would: a C call that keeps the GIL, so the renewal thread cannot run either."""
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))


def main() -> None:
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379"
    locks = relock.Relock(redis.Redis.from_url(url))
    ledger = Ledger()
    key = f"account:acct-7:{uuid.uuid4().hex[:8]}"

    a = locks.acquire(key, ttl=0.2, wait=0)  # renewed every ttl/3 while held
    if a is None:
        raise SystemExit("worker-a did not get a free lock")
    print(f"worker-a: token {a.token}")
    balance = ledger.balance()
    if not ledger.set_balance(balance + 50, a.token):
        raise SystemExit("the ledger refused worker-a's first write")
    print(f"worker-a: write accepted, balance {balance} -> {balance + 50}")

    stall(0.4)  # longer than the 200 ms ttl, and no renewal ran: the lock expires
    print("worker-a: stalled 400 ms, longer than its 200 ms ttl")

    # Another worker (every hold has an owner of its own, so one Relock serves both).
    with locks.lock(key, ttl=10, wait=5) as b:
        print(f"worker-b: token {b.token}")
        balance = ledger.balance()
        if not ledger.set_balance(balance + 50, b.token):
            raise SystemExit("the ledger refused worker-b's write")
        print(f"worker-b: write accepted, balance {balance} -> {balance + 50}")

        # worker-a wakes up and carries on as if it still held the lock.
        if ledger.set_balance(1_000_000, a.token):
            raise SystemExit("the ledger accepted a stale write")
        print(f"worker-a: stale write with token {a.token} rejected")
        if not a.lost.is_set():
            raise SystemExit("worker-a's hold does not know it is lost")
        print(f"worker-a: its hold knows it is lost: {a.reason}")
        print(f"worker-a: release() -> {a.release()} (it no longer holds the lock)")
    print(f"worker-b: released; balance {ledger.balance()}")


if __name__ == "__main__":
    main()
