"""Renewal: a job that runs longer than its lock's ttl keeps the lock, and learns of its loss.

First a 6 s job under a 3 s lease: the package renews the hold in the background every
ttl/3 (1 s), so the job keeps its lock, and its token, to the end; the lock is released when
the `with` block ends. Then the same job again, but an operator breaks the lock
(LOCK.FORCERELEASE) 500 ms in: the next renewal is refused, the hold is marked lost with the
reason, and the job, which calls `hold.check()` between its steps, stops with LockLost instead
of carrying on unprotected.

    python3 examples/python/renew.py        # against $REDIS_URL (default redis://127.0.0.1:6379)
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

TTL = 3.0
JOB = 6.0
STEPS = 25


def job(hold: relock.Hold) -> int:
    """A long job in small steps; before each it makes sure it still holds the lock. Returns
    how many times the hold's validity moved on (each renewal moves it)."""
    extended, valid_until = 0, hold.valid_until
    for _ in range(STEPS):
        hold.check()  # raises relock.LockLost once the lock is lost
        time.sleep(JOB / STEPS)
        if hold.valid_until != valid_until:
            extended, valid_until = extended + 1, hold.valid_until
    return extended


def main() -> None:
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379"
    locks = relock.Relock(redis.Redis.from_url(url))
    key = f"jobs:nightly:{uuid.uuid4().hex[:8]}"

    # 1. The lease outlives its ttl because it is renewed.
    with locks.lock(key, ttl=TTL, wait=5) as hold:
        print(f"token {hold.token}, ttl {TTL * 1000:.0f} ms, job {JOB * 1000:.0f} ms")
        extended = job(hold)
        info = locks.info(key)
        if info is None or info.token != hold.token:
            raise SystemExit(f"the lock was not kept: {info}")
        print(f"renewed {extended} times; still held after the job, same token")
    print(f"released: locks.info() -> {locks.info(key)}")

    # 2. An operator breaks the lock while the job runs: the renewal reports the loss.
    broken = []
    operator = threading.Timer(0.5, lambda: broken.append(locks.force_release(key)))
    started = time.monotonic()
    try:
        with locks.lock(key, ttl=TTL, wait=5) as hold:
            print(f"token {hold.token}")
            operator.start()
            job(hold)
        raise SystemExit("the job ran to its end under a broken lock")
    except relock.LockLost as e:
        elapsed_ms = round((time.monotonic() - started) * 1000)
        operator.join()
        print(f"operator: force_release() -> {broken[0]} (at 500 ms)")
        print(f"lost: {e.reason}")
        print(f"job stopped after {elapsed_ms} ms (retryable: {e.retryable}: acquire again)")
    print(f"locks.info() -> {locks.info(key)}")


if __name__ == "__main__":
    main()
