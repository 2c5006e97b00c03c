"""relock from asyncio (redis.asyncio): wait for a lock, keep it alive from a task, and cancel the
work under it if the lock is lost.

    from relock_asyncio import connect, hold

    async with hold(connect(), "orders:42", ttl_ms=10_000, wait_ms=5_000) as held:
        await store.write(data, fence=held.token)

Copy it into your project with relock.py, which it shares its helpers with.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from relock import LockBusy, LockLost, info_from_reply, redis, url

import redis.asyncio as aioredis  # after relock, which finds .deps/


def connect() -> aioredis.Redis:
    """An asyncio client for $REDIS_URL (default: the server `make run` starts), replies as str."""
    return aioredis.Redis.from_url(url(), decode_responses=True)


async def lock_info(client: aioredis.Redis, key: str) -> dict | None:
    """LOCK.INFO key: None when there is no lock, else owner, token, count, ttl and waiters."""
    return info_from_reply(await client.execute_command("LOCK.INFO", key))


class hold:  # noqa: N801  (used like asyncio.timeout: `async with hold(...)`)
    """Holds `key` for the body of an `async with`.

    On entry it waits with LOCK.WAIT (first in, first out; up to wait_ms, 0: without limit) and
    raises LockBusy if the wait ends without the lock. While the body runs, a task renews the
    lease every ttl/3. On exit it stops renewing and releases. If a renewal answers nil, the lock
    is gone (expired, broken by an operator): the body is cancelled at its next await and
    LockLost is raised in place of the cancellation, the way asyncio.timeout() raises
    TimeoutError.
    """

    def __init__(self, client: aioredis.Redis, key: str, ttl_ms: int = 10_000,
                 wait_ms: int = 0, owner: str | None = None):
        self.client = client
        self.key = key
        self.ttl_ms = ttl_ms
        self.wait_ms = wait_ms
        self.owner = owner or str(uuid.uuid4())
        self.token: int | None = None
        self.renewals = 0
        self.lost: str | None = None
        self._body: asyncio.Task | None = None
        self._renewer: asyncio.Task | None = None

    async def __aenter__(self) -> hold:
        self.token = await self.client.execute_command(
            "LOCK.WAIT", self.key, self.owner, self.ttl_ms, self.wait_ms)
        if self.token is None:
            raise LockBusy(f"{self.key} was not free within {self.wait_ms} ms")
        self._body = asyncio.current_task()
        self._renewer = asyncio.create_task(self._renew(), name=f"renew {self.key}")
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        self._renewer.cancel()
        await asyncio.wait([self._renewer])  # no renewal in flight from here on
        if self.lost is None:
            await self.client.execute_command("LOCK.RELEASE", self.key, self.owner)
            return False
        if exc_type is asyncio.CancelledError and self._body.uncancel() == 0:
            raise LockLost(f"{self.key}: {self.lost}") from None
        return False

    async def _renew(self) -> None:
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            try:
                if await self.client.execute_command(
                        "LOCK.RENEW", self.key, self.owner, self.ttl_ms) is not None:
                    self.renewals += 1
                    last_renewed = time.monotonic()
                    continue
                reason = "LOCK.RENEW answered nil: the lock expired or was taken away"
            except redis.RedisError as e:
                # A dropped connection or a lost reply: the lease may still run, so try again
                # until it must have ended.
                if time.monotonic() - last_renewed < self.ttl_ms / 1000:
                    continue
                reason = f"could not renew for {self.ttl_ms} ms: {e}"
            self.lost = reason
            self._body.cancel()
            return
