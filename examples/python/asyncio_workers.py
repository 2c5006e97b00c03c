"""asyncio: workers queue for one lock and get it in turn; a worker whose lock is broken stops.

Three workers want the same lock. They queue with LOCK.WAIT and are served first in, first out,
each with a larger token; each works 800 ms under a 600 ms lease that a task renews. Then a
fourth worker's lock is broken by an operator (LOCK.FORCERELEASE): its renewal notices, its work
is cancelled and `async with` raises LockLost.

    python3 examples/python/asyncio_workers.py   # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import asyncio
import time
import uuid

from relock import LockLost
from relock_asyncio import connect, hold, lock_info

TTL_MS = 600
WORK_S = 0.8


async def worker(client, name: str, key: str) -> int:
    started = time.monotonic()
    async with hold(client, key, ttl_ms=TTL_MS, wait_ms=10_000) as held:
        waited_ms = round((time.monotonic() - started) * 1000)
        await asyncio.sleep(WORK_S)  # longer than the lease: the renewal task keeps it
    print(f"{name}: token {held.token} after waiting {waited_ms} ms; renewed {held.renewals} times")
    return held.token


async def until_queued(client, key: str, waiters: int) -> None:
    """Until the lock is held with this many clients queued behind it (so that start order is
    queue order)."""
    async with asyncio.timeout(10):
        while (info := await lock_info(client, key)) is None or info["waiters"] < waiters:
            await asyncio.sleep(0.005)


async def main() -> None:
    client = connect()
    key = f"report:weekly:{uuid.uuid4().hex[:8]}"

    names = ["worker-1", "worker-2", "worker-3"]
    tasks = []
    for queued_before, name in enumerate(names):
        tasks.append(asyncio.create_task(worker(client, name, key)))
        await until_queued(client, key, queued_before)
    tokens = await asyncio.gather(*tasks)
    if tokens != sorted(set(tokens)):
        raise SystemExit(f"tokens out of queue order: {tokens}")
    print(f"served in queue order: {', '.join(names)}; tokens increasing")

    async def operator() -> int:
        await asyncio.sleep(0.3)
        return await client.execute_command("LOCK.FORCERELEASE", key)

    breaker = asyncio.create_task(operator())
    started = time.monotonic()
    try:
        async with hold(client, key, ttl_ms=TTL_MS) as held:
            print(f"worker-4: token {held.token}, starting a 5000 ms job")
            await asyncio.sleep(5)
        raise SystemExit("worker-4 finished a job whose lock was broken")
    except LockLost as e:
        elapsed_ms = round((time.monotonic() - started) * 1000)
        print(f"operator: LOCK.FORCERELEASE -> {await breaker} (at 300 ms)")
        print(f"worker-4: cancelled after {elapsed_ms} ms: {e}")
    print(f"LOCK.INFO -> {await lock_info(client, key)}")
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
