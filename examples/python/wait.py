"""Waiting without polling: LOCK.WAIT queues until the holder lets go, or gives up after a timeout.

A holder keeps the lock for 200 ms; a waiter queues with LOCK.WAIT and is handed the lock (with a
new, larger token) the moment it is released. A third client that will only wait 300 ms gives up.

    python3 examples/python/wait.py         # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import threading
import time
import uuid

from relock import Lock, connect, lock_info


def main() -> None:
    redis = connect()
    key = f"report:daily:{uuid.uuid4().hex[:8]}"

    holder = Lock(redis, key, ttl_ms=10_000)
    print(f"holder: token {holder.acquire()}")

    def finish_work() -> None:
        time.sleep(0.2)  # the holder's work
        deadline = time.monotonic() + 10
        while lock_info(redis, key)["waiters"] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)  # for the demo: let go only once the waiter is queued
        print(f"holder: release -> {holder.release()} (someone is waiting: handed over)")

    finisher = threading.Thread(target=finish_work)
    finisher.start()

    # LOCK.WAIT blocks this connection until the lock is handed over; the holder's release goes
    # through another connection of the pool.
    waiter = Lock(redis, key, ttl_ms=10_000)
    started = time.monotonic()
    token = waiter.wait(5_000)
    waited_ms = round((time.monotonic() - started) * 1000)
    finisher.join()
    if token is None:
        raise SystemExit(f"waiter: not granted within 5000 ms (waited {waited_ms} ms)")
    print(f"waiter: waited {waited_ms} ms then got token {token}")

    impatient = Lock(redis, key, ttl_ms=10_000)
    started = time.monotonic()
    if impatient.wait(300) is not None:
        raise SystemExit("impatient: granted a lock that the waiter holds")
    gave_up_ms = round((time.monotonic() - started) * 1000)
    print(f"impatient: gave up after {gave_up_ms} ms (LOCK.WAIT answered nil)")

    print(f"waiter: release -> {waiter.release()}")
    print(f"LOCK.INFO -> {lock_info(redis, key)}")


if __name__ == "__main__":
    main()
