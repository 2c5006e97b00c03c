"""Waiting without polling: a lock's waiters queue in the server, first in, first out.

A holder keeps the lock for 200 ms; a waiter asks for it with `wait=5` and is handed the lock
(with a new, larger token) the moment it is released, without polling (LOCK.WAIT). A third
worker that will wait only 300 ms gives up with NotAcquired.

    python3 examples/python/wait.py         # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import os
import sys
import threading
import time
import uuid

# scripts/setup-examples installs relock and redis-py into .deps/ beside this file.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".deps"))

import redis  # noqa: E402
import relock  # noqa: E402


def main() -> None:
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379"
    locks = relock.Relock(redis.Redis.from_url(url))
    key = f"report:daily:{uuid.uuid4().hex[:8]}"

    holder = locks.acquire(key, ttl=10, wait=0)
    if holder is None:
        raise SystemExit("holder: the lock was not free")
    print(f"holder: token {holder.token}")

    def finish_work() -> None:
        time.sleep(0.2)  # the holder's work
        deadline = time.monotonic() + 10
        while locks.info(key).waiters == 0 and time.monotonic() < deadline:
            time.sleep(0.005)  # for the demo: let go only once the waiter is queued
        print(f"holder: release() -> {holder.release()} (someone is waiting: handed over)")

    finisher = threading.Thread(target=finish_work)
    finisher.start()

    # The wait takes a connection of the client's pool until the lock is handed over; the
    # holder's release goes through another one.
    started = time.monotonic()
    with locks.lock(key, ttl=10, wait=5) as hold:
        waited_ms = round((time.monotonic() - started) * 1000)
        finisher.join()
        print(f"waiter: waited {waited_ms} ms then got token {hold.token}")

        started = time.monotonic()
        try:
            with locks.lock(key, ttl=10, wait=0.3):
                raise SystemExit("impatient: granted a lock that the waiter holds")
        except relock.NotAcquired as e:
            gave_up_ms = round((time.monotonic() - started) * 1000)
            print(f"impatient: gave up after {gave_up_ms} ms: {e} (retryable: {e.retryable})")
    print(f"waiter: released; locks.info() -> {locks.info(key)}")


if __name__ == "__main__":
    main()
