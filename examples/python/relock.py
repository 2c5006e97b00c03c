"""relock from Python: a lock with a fencing token, waiting, renewal and reentrancy.

A thin layer over redis-py that sends relock's LOCK.* commands. Copy it into your project
(without the .deps lines below). It works with redis-py 5 to 8, over RESP2 and RESP3.

    from relock import Lock, connect

    with Lock(connect(), "orders:42", ttl_ms=10_000, wait_ms=5_000) as lock:
        store.write(data, fence=lock.token)
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid

# scripts/setup-examples installs redis-py into .deps/ beside this file; use it when present.
_DEPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".deps")
if os.path.isdir(_DEPS):
    sys.path.insert(0, _DEPS)

import redis  # noqa: E402
from redis import ResponseError  # noqa: E402,F401  (an error reply, e.g. "invalid ttl_ms")

#: What `make run` starts.
DEFAULT_URL = "redis://127.0.0.1:6379"


def url() -> str:
    """$REDIS_URL, else the server `make run` starts."""
    return os.environ.get("REDIS_URL") or DEFAULT_URL


def connect() -> redis.Redis:
    """A client for url(), with replies decoded to str."""
    return redis.Redis.from_url(url(), decode_responses=True)


def error_text(error: redis.ResponseError) -> str:
    """An error reply without its `ERR ` code (redis-py 8 strips it, older versions keep it)."""
    return str(error).removeprefix("ERR ")


def info_from_reply(reply) -> dict | None:
    """LOCK.INFO's reply as a dict: a map under RESP3, a flat [name, value, ...] list under RESP2."""
    if reply is None:
        return None
    if isinstance(reply, dict):
        return dict(reply)
    return dict(zip(reply[0::2], reply[1::2]))


def lock_info(client: redis.Redis, key: str) -> dict | None:
    """LOCK.INFO key: None when there is no lock, else owner, token, count, ttl, waiters, mode,
    holders and limit."""
    return info_from_reply(client.execute_command("LOCK.INFO", key))


class LockBusy(Exception):
    """Someone else holds the lock (or did not let go within the wait)."""


class LockLost(Exception):
    """The lock ended while its holder was still working under it."""


class Lock:
    """One owner's hold on one key.

    `owner` is the proof of ownership: a fresh UUID unless given. `ttl_ms` is the lease; a holder
    that works longer keeps it alive with keep_alive(). As a context manager it waits up to
    `wait_ms` (LOCK.WAIT; 0 waits without limit) and releases on exit.
    """

    def __init__(self, client: redis.Redis, key: str, ttl_ms: int = 10_000,
                 wait_ms: int = 0, owner: str | None = None):
        self.client = client
        self.key = key
        self.ttl_ms = ttl_ms
        self.wait_ms = wait_ms
        self.owner = owner or str(uuid.uuid4())
        self.token: int | None = None

    def acquire(self) -> int | None:
        """LOCK.ACQUIRE, without waiting: the fencing token, or None if someone else holds it."""
        self.token = self.client.execute_command("LOCK.ACQUIRE", self.key, self.owner, self.ttl_ms)
        return self.token

    def wait(self, timeout_ms: int) -> int | None:
        """LOCK.WAIT: queue (first in, first out) until granted, then the token; None once
        timeout_ms passes (0 waits without limit).

        It occupies one connection of the client's pool while it waits, so a client's
        socket_timeout, if set, must be longer than timeout_ms.
        """
        self.token = self.client.execute_command(
            "LOCK.WAIT", self.key, self.owner, self.ttl_ms, timeout_ms)
        return self.token

    def reenter(self) -> int | None:
        """LOCK.REENTER: the reentrancy count after this entry, or None if someone else holds it."""
        count = self.client.execute_command("LOCK.REENTER", self.key, self.owner, self.ttl_ms)
        if count == 1:
            # A first entry is a new hold, with a new token; a re-entry keeps it.
            self.token = (lock_info(self.client, self.key) or {}).get("token")
        return count

    def renew(self) -> bool:
        """LOCK.RENEW: True if still held (its lease is ttl_ms again), False if it is gone."""
        return self.client.execute_command(
            "LOCK.RENEW", self.key, self.owner, self.ttl_ms) is not None

    def release(self) -> int | None:
        """LOCK.RELEASE: the count left (0: released, and handed to the first waiter), or None
        when this owner does not hold it (expired, broken, never held)."""
        return self.client.execute_command("LOCK.RELEASE", self.key, self.owner)

    @contextlib.contextmanager
    def reentered(self):
        """A reentrant section: LOCK.REENTER on entry, LOCK.RELEASE (count - 1) on exit."""
        count = self.reenter()
        if count is None:
            raise LockBusy(f"{self.key} is held by another owner")
        try:
            yield count
        finally:
            self.release()

    def keep_alive(self, every_ms: int | None = None) -> Renewal:
        """Starts renewing every `every_ms` (default ttl/3) in a background thread."""
        return Renewal(self, every_ms or max(1, self.ttl_ms // 3)).start()

    def __enter__(self) -> Lock:
        if self.wait(self.wait_ms) is None:
            raise LockBusy(f"{self.key} was not free within {self.wait_ms} ms")
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Renewal:
    """A thread that keeps a lock alive with LOCK.RENEW until stop() or the lock is lost.

    When a renewal answers nil, the lock is gone (it expired, an operator broke it, the key was
    deleted): `lost` is set, `reason` says why, and the thread ends.
    The holder checks `lost` between steps of its work and stops. Call stop() before releasing
    (using it as a context manager does), so that no renewal races the release.
    """

    def __init__(self, lock: Lock, every_ms: int):
        self.lock = lock
        self.every = every_ms / 1000
        self.renewals = 0
        self.lost = threading.Event()
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"renew {lock.key}", daemon=True)

    def start(self) -> Renewal:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops renewing and waits for a renewal in flight to finish."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Renewal:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        last_renewed = time.monotonic()
        while not self._stop.wait(self.every):
            try:
                if self.lock.renew():
                    self.renewals += 1
                    last_renewed = time.monotonic()
                    continue
                reason = "LOCK.RENEW answered nil: the lock expired or was taken away"
            except redis.RedisError as e:
                # A dropped connection or a lost reply: the lease may still run, so try again
                # until it must have ended.
                if time.monotonic() - last_renewed < self.lock.ttl_ms / 1000:
                    continue
                reason = f"could not renew for {self.lock.ttl_ms} ms: {e}"
            self.reason = reason
            self.lost.set()
            return
