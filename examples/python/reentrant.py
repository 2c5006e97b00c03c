"""Reentrancy: code that holds a lock can call code that takes the same lock again.

save_order() holds the order's lock and calls update_stock(), which takes it too: LOCK.REENTER
counts the entries (1, 2), each exit releases one (1, 0), and the hold keeps one token throughout.
Meanwhile another owner is refused, and a bad argument comes back as an error reply.

    python3 examples/python/reentrant.py    # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import uuid

from relock import Lock, ResponseError, connect, error_text, lock_info


def update_stock(lock: Lock) -> None:
    with lock.reentered() as count:
        info = lock_info(lock.client, lock.key)
        print(f"update_stock: count {count}, token {info['token']}")
        other = Lock(lock.client, lock.key)
        print(f"another owner: LOCK.REENTER -> {other.reenter()}")


def save_order(lock: Lock) -> None:
    with lock.reentered() as count:
        print(f"save_order: count {count}, token {lock.token}")
        update_stock(lock)
        print(f"save_order: back to count {lock_info(lock.client, lock.key)['count']}")
    print(f"save_order: done, LOCK.INFO -> {lock_info(lock.client, lock.key)}")


def main() -> None:
    client = connect()
    lock = Lock(client, f"orders:42:{uuid.uuid4().hex[:8]}", ttl_ms=10_000)
    save_order(lock)
    try:
        client.execute_command("LOCK.REENTER", lock.key, lock.owner, 0)
        raise SystemExit("LOCK.REENTER with ttl 0 was accepted")
    except ResponseError as e:
        print(f"ttl 0: error {error_text(e)}")


if __name__ == "__main__":
    main()
