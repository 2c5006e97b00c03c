"""Reentrancy: code that holds a lock can call code that takes the same lock again.

save_order() holds the order's lock and calls update_stock(), which enters it again through the
hold (`hold.reenter()`): the server counts the entries (1, 2), each exit gives one back (1, 0),
and the hold keeps one token throughout. Reentrancy is only ever asked for this way: any other
acquisition, even from the same thread, is another owner and is refused. A bad argument is
refused before any server is asked.

    python3 examples/python/reentrant.py    # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import os
import sys
import uuid

# scripts/setup-examples installs relock and redis-py into .deps/ beside this file.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".deps"))

import redis  # noqa: E402
import relock  # noqa: E402


def update_stock(locks: relock.Relock, hold: relock.Hold) -> None:
    with hold.reenter() as count:
        print(f"update_stock: count {count}, token {locks.info(hold.key).token}")
        print(f"another owner: locks.acquire(wait=0) -> {locks.acquire(hold.key, wait=0)}")


def save_order(locks: relock.Relock, key: str) -> None:
    with locks.lock(key, ttl=10) as hold:
        print(f"save_order: count {locks.info(key).count}, token {hold.token}")
        update_stock(locks, hold)
        print(f"save_order: back to count {locks.info(key).count}")
    print(f"save_order: done, locks.info() -> {locks.info(key)}")


def main() -> None:
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379"
    locks = relock.Relock(redis.Redis.from_url(url))
    key = f"orders:42:{uuid.uuid4().hex[:8]}"
    save_order(locks, key)
    try:
        locks.acquire(key, ttl=0)
        raise SystemExit("a ttl of 0 was accepted")
    except relock.InvalidArgument as e:
        print(f"ttl 0: {type(e).__name__}: {e} (retryable: {e.retryable})")


if __name__ == "__main__":
    main()
