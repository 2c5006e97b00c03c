"""Renewal: a job that runs longer than its lock's ttl keeps the lock alive, and learns of its loss.

First a 2.5 s job under a 1.2 s lease: a background thread renews it every 400 ms, stops when
the job is done, and the lock is released. Then the same job again, but an operator breaks the
lock (LOCK.FORCERELEASE) from another connection after 500 ms: the next renewal answers nil, the
renewal thread reports the loss, and the job stops instead of carrying on unprotected.

    python3 examples/python/renew.py        # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import threading
import time
import uuid

from relock import Lock, connect, lock_info

TTL_MS = 1_200
JOB_S = 2.5


def job(renewal, steps: int = 25) -> int:
    """A long job in small steps; between steps it checks that it still holds the lock."""
    for step in range(steps):
        if renewal.lost.is_set():
            return step
        time.sleep(JOB_S / steps)
    return steps


def main() -> None:
    redis = connect()
    key = f"jobs:nightly:{uuid.uuid4().hex[:8]}"

    # 1. The lease outlives its ttl because it is renewed.
    with Lock(redis, key, ttl_ms=TTL_MS, wait_ms=5_000) as lock:
        print(f"token {lock.token}, ttl {TTL_MS} ms, job {JOB_S * 1000:.0f} ms")
        with lock.keep_alive() as renewal:
            job(renewal)
        info = lock_info(redis, key)
        if info is None or info["token"] != lock.token:
            raise SystemExit(f"the lock was not kept: {info}")
        print(f"renewed {renewal.renewals} times; still held after the job, same token")
    print(f"released -> LOCK.INFO {lock_info(redis, key)}")
    count = renewal.renewals
    time.sleep(0.5)
    print(f"renewal stopped: {renewal.renewals - count} renewals after the release")

    # 2. An operator breaks the lock while the job runs: the renewal reports the loss.
    lock = Lock(redis, key, ttl_ms=TTL_MS)
    print(f"token {lock.acquire()}")
    admin = connect()
    broken = []
    operator = threading.Timer(
        0.5, lambda: broken.append(admin.execute_command("LOCK.FORCERELEASE", key)))
    operator.start()
    started = time.monotonic()
    with lock.keep_alive() as renewal:
        steps = job(renewal)
    elapsed_ms = round((time.monotonic() - started) * 1000)
    operator.join()
    if not renewal.lost.is_set():
        raise SystemExit("the renewal did not notice that the lock was broken")
    print(f"operator: LOCK.FORCERELEASE -> {broken[0]} (at 500 ms)")
    print(f"lost: {renewal.reason}")
    print(f"job stopped after {elapsed_ms} ms ({steps} of 25 steps); renewals before the loss: "
          f"{renewal.renewals}")
    print(f"release -> {lock.release()} (nothing to release)")
    print(f"LOCK.INFO -> {lock_info(redis, key)}")


if __name__ == "__main__":
    main()
