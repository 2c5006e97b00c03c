"""asyncio: workers queue for one lock and get it in turn; a worker whose lock is broken stops.

Three tasks want the same lock. They queue in the server (LOCK.WAIT) and are served first in,
first out, each with a larger token; each works 1.5 s under a 1.2 s lease that the package's
renewal task keeps alive. Then a fourth worker's lock is broken by an operator: the renewal is
refused, `hold.lost` (an asyncio.Event) is set, and the worker, which races its job against
that event, cancels the job and raises LockLost.

    python3 examples/python/asyncio_workers.py   # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import asyncio
import os
import sys
import time
import uuid

# scripts/setup-examples installs relock and redis-py into .deps/ beside this file.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".deps"))

import redis.asyncio as aredis  # noqa: E402
import relock  # noqa: E402
import relock.aio  # noqa: E402

TTL = 1.2
WORK = 1.5


async def worker(locks: relock.aio.Relock, name: str, key: str) -> int:
    started = time.monotonic()
    async with locks.lock(key, ttl=TTL, wait=10) as hold:
        waited_ms = round((time.monotonic() - started) * 1000)
        await asyncio.sleep(WORK)  # longer than the lease: the renewal task keeps it
        hold.check()
    print(f"{name}: token {hold.token} after waiting {waited_ms} ms")
    return hold.token


async def until_queued(locks: relock.aio.Relock, key: str, waiters: int) -> None:
    """Until the lock is held with this many tasks queued behind it (so that start order is
    queue order). A read that may pass (a timeout on a busy server) is asked again."""
    async with asyncio.timeout(10):
        while True:
            try:
                info = await locks.info(key)
            except relock.ServerError as e:
                if not e.retryable:
                    raise
                info = None
            if info is not None and info.waiters >= waiters:
                return
            await asyncio.sleep(0.005)


async def main() -> None:
    client = aredis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379")
    locks = relock.aio.Relock(client)
    key = f"report:weekly:{uuid.uuid4().hex[:8]}"

    names = ["worker-1", "worker-2", "worker-3"]
    tasks = []
    for queued_before, name in enumerate(names):
        tasks.append(asyncio.create_task(worker(locks, name, key)))
        await until_queued(locks, key, queued_before)
    tokens = await asyncio.gather(*tasks)
    if tokens != sorted(set(tokens)):
        raise SystemExit(f"tokens out of queue order: {tokens}")
    print(f"served in queue order: {', '.join(names)}; tokens increasing")

    async def operator() -> int:
        await asyncio.sleep(0.3)
        return await locks.force_release(key)

    started = time.monotonic()
    try:
        async with locks.lock(key, ttl=TTL) as hold:
            print(f"worker-4: token {hold.token}, starting a 5000 ms job")
            breaker = asyncio.create_task(operator())
            job = asyncio.create_task(asyncio.sleep(5))
            lost = asyncio.create_task(hold.lost.wait())
            # Whichever comes first: the job's end, or the loss of its lock.
            await asyncio.wait([job, lost], return_when=asyncio.FIRST_COMPLETED)
            job.cancel()
            lost.cancel()
            hold.check()  # raises relock.LockLost when the lock was lost
        raise SystemExit("worker-4 finished a job whose lock was broken")
    except relock.LockLost as e:
        elapsed_ms = round((time.monotonic() - started) * 1000)
        print(f"operator: force_release() -> {await breaker} (at 300 ms)")
        print(f"worker-4: job cancelled after {elapsed_ms} ms: {e.reason}")
    print(f"locks.info() -> {await locks.info(key)}")
    await locks.aclose()  # waits for the releases the package runs in the background
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
