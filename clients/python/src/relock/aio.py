"""relock for ``redis.asyncio``: the same API as ``relock.Relock``, with coroutines, an
``asyncio.Event`` for ``hold.lost`` and a renewal task per hold.

    import redis.asyncio as redis, relock.aio

    locks = relock.aio.Relock(redis.Redis())
    async with locks.lock("orders:42", ttl=30, wait=5) as hold:
        await store.write(data, fence=hold.token)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref
from typing import Any, Literal, AsyncIterator, Callable, Sequence, TypeVar

import redis.asyncio as aredis
import redis.asyncio.cluster as acluster

from . import _core as core
from ._core import Failure, Holder, LockInfo, Round, Waiter
from .errors import (
    InvalidArgument,
    LockLost,
    NotAcquired,
    OtherLimit,
    OtherMode,
    RelockError,
    ServerError,
)

__all__ = [
    "Hold",
    "InvalidArgument",
    "LockLost",
    "NotAcquired",
    "OtherLimit",
    "OtherMode",
    "Relock",
    "RelockError",
    "ServerError",
]

T = TypeVar("T")
WAIT_GRACE = 1.0


class _Server:
    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = isinstance(client, acluster.RedisCluster)
        if self.cluster:
            self.name = "cluster"
        else:
            kw = client.connection_pool.connection_kwargs
            self.name = core.server_name(kw.get("host", "localhost"), kw.get("port", 6379), kw.get("path"))

    async def call(self, args: Sequence[Any], timeout: float | None) -> Any:
        if timeout is None:
            return await self.client.execute_command(*args)
        # A cancelled command closes its connection (redis-py), so nothing is left queued.
        return await asyncio.wait_for(self.client.execute_command(*args), timeout)


class Relock:
    """``relock.Relock`` for ``redis.asyncio`` clients: a ``redis.asyncio.Redis``, a
    ``redis.asyncio.cluster.RedisCluster``, or a list of ``redis.asyncio.Redis`` (Redlock).
    Same options and defaults."""

    def __init__(
        self,
        client: Any,
        *,
        owner_prefix: str | None = None,
        node_timeout: float = core.DEFAULT_NODE_TIMEOUT,
        retry_delay: float = core.DEFAULT_RETRY_DELAY,
        max_partial_hold: float = core.DEFAULT_MAX_PARTIAL_HOLD,
    ) -> None:
        clients = list(client) if isinstance(client, (list, tuple)) else [client]
        if not clients:
            raise InvalidArgument("no servers given")
        if len(clients) > 1 and any(isinstance(c, acluster.RedisCluster) for c in clients):
            raise InvalidArgument("Redlock takes independent masters; pass a RedisCluster alone")
        self._servers = [_Server(c) for c in clients]
        names = [s.name for s in self._servers]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise InvalidArgument(f"{name} is named twice: Redlock needs independent masters")
        self._names = names
        self._prefix: object = core.HOST_PID if owner_prefix is None else owner_prefix
        core.make_owner(self._prefix)
        if not node_timeout >= 0.001:
            raise InvalidArgument(f"node_timeout {node_timeout!r} is below 1 ms: every request would time out")
        self.node_timeout = float(node_timeout)
        self.retry_delay = float(retry_delay)
        self.max_partial_hold = float(max_partial_hold)
        self._background: set[asyncio.Task[Any]] = set()
        self._holds: weakref.WeakSet[Hold] = weakref.WeakSet()

    @property
    def servers(self) -> list[str]:
        return list(self._names)

    @property
    def quorum(self) -> int:
        return core.quorum(len(self._servers))

    def new_owner(self) -> str:
        return core.make_owner(self._prefix)

    @contextlib.asynccontextmanager
    async def lock(
        self,
        key: str,
        ttl: float = core.DEFAULT_TTL,
        wait: float | None = None,
        shared: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[Hold]:
        """``async with locks.lock(key, ...) as hold``: see ``relock.Relock.lock``."""
        hold = await self._acquire(key, ttl, wait, shared, limit, raise_busy=True)
        assert hold is not None
        try:
            yield hold
        finally:
            await hold._close()

    async def acquire(
        self,
        key: str,
        ttl: float = core.DEFAULT_TTL,
        wait: float | None = None,
        shared: bool = False,
        limit: int | None = None,
    ) -> Hold | None:
        """The ``Hold`` (renewed in the background until ``await hold.release()``), or None
        when the lock was not granted within ``wait``."""
        return await self._acquire(key, ttl, wait, shared, limit, raise_busy=False)

    async def _acquire(
        self, key: str, ttl: float, wait: float | None, shared: bool, limit: int | None, raise_busy: bool
    ) -> Hold | None:
        ttl_ms = core.check_ttl(ttl)
        ttl_s = ttl_ms / 1000
        limit_wait = core.check_wait(wait)
        core.check_mode(shared, limit, 1 if self._servers[0].cluster else len(self._servers))
        mode = core.mode_args(shared, limit)
        deadline = None if limit_wait is None else time.monotonic() + limit_wait
        while True:
            owner = self.new_owner()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                if remaining == 0.0:
                    rnd = await self._round(["LOCK.ACQUIRE", key, owner, ttl_ms, *mode])
                else:
                    rnd = await self._wait_round(key, owner, ttl_ms, remaining, mode)
            except asyncio.CancelledError:
                # Whatever lands for this owner is given back.
                self._release_late(key, owner, None)
                raise
            until = rnd.valid_until(ttl_s)
            if rnd.granted_late(ttl_s):
                renewal = await self._round(["LOCK.RENEW", key, owner, ttl_ms])
                until = renewal.valid_until(ttl_s)
                if until is None:
                    rnd = renewal
            if until is not None:
                tokens = {self._names[i]: int(t) for i, t in sorted(rnd.agreed.items())}
                hold = Hold(self, key, owner, ttl_s, tokens, until, mode)
                self._holds.add(hold)
                return hold
            await self._release_failed(key, owner, rnd)
            passed = deadline is not None and time.monotonic() >= deadline
            failure = rnd.after_failed(key, ttl_s, limit_wait, passed, bounded=remaining is not None)
            if failure is not None:
                if raise_busy or not isinstance(failure, NotAcquired):
                    raise failure
                return None
            pause = core.jitter(self.retry_delay)
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(pause)

    # --- rounds ---------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _ask(self, i: int, args: Sequence[Any], timeout: float | None) -> tuple[Any, Failure | None]:
        try:
            return await self._servers[i].call(args, timeout), None
        except asyncio.TimeoutError:
            return None, Failure(f"no reply within {timeout} s", timeout=True)
        except Exception as e:  # noqa: BLE001
            return None, core.classify(e)

    async def _round(
        self,
        args: Sequence[Any],
        targets: Sequence[bool] | None = None,
        until_all: bool = False,
        timeout: float | None | Literal["node"] = "node",
        partial_hold: float | None = None,
    ) -> Round[Any]:
        rnd: Round[Any] = Round(self._names, time.monotonic(), until_all)
        # A wait without limit has no bound; everything else is bounded by the node timeout.
        t = self.node_timeout if isinstance(timeout, str) else timeout
        if len(self._servers) == 1:
            if targets is not None and not targets[0]:
                rnd.on_reply(0, None)
            else:
                value, failure = await self._ask(0, args, t)
                rnd.on_reply(0, value, failure)
            return rnd.finish(time.monotonic())
        pending: dict[asyncio.Task[tuple[Any, Failure | None]], int] = {}
        for i in range(len(self._servers)):
            if targets is not None and not targets[i]:
                rnd.on_reply(i, None)
                continue
            # Tasks of their own: a request under way when the round is decided goes on to
            # its end (a late grant lands, to be released), unless it is a wait (cut off).
            pending[self._spawn(self._ask(i, args, t))] = i
        cut_at: float | None = None
        while pending and rnd.progress() == "pending":
            left = None if cut_at is None else max(0.0, cut_at - time.monotonic())
            done, _ = await asyncio.wait(list(pending), timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                break
            for f in done:
                value, failure = f.result()
                rnd.on_reply(pending.pop(f), value, failure)
            if partial_hold is not None and rnd.agreed and cut_at is None:
                cut_at = time.monotonic() + partial_hold
        if partial_hold is not None:
            for f, i in pending.items():
                f.cancel()
                if rnd.progress() == "pending":
                    rnd.on_reply(i, None, Failure("no quorum within the partial-hold limit", timeout=True))
        return rnd.finish(time.monotonic())

    async def _wait_round(self, key: str, owner: str, ttl_ms: int, remaining: float | None, mode: list[str]) -> Round[Any]:
        args = ["LOCK.WAIT", key, owner, ttl_ms, core.wait_ms(remaining), *mode]
        bound = None if remaining is None else remaining + WAIT_GRACE + self.node_timeout
        if len(self._servers) == 1:
            return await self._round(args, timeout=bound)
        return await self._round(args, timeout=bound, partial_hold=min(self.max_partial_hold, ttl_ms / 4000))

    async def _release_failed(self, key: str, owner: str, rnd: Round[Any]) -> None:
        now, later = rnd.give_back()
        if any(now):
            await self._round(["LOCK.RELEASE", key, owner], targets=now, until_all=True)
        if any(later):
            self._release_late(key, owner, later)

    def _release_late(self, key: str, owner: str, targets: list[bool] | None) -> None:
        async def later() -> None:
            await self._round(["LOCK.RELEASE", key, owner], targets=targets, until_all=True)
            await asyncio.sleep(0.1)
            await self._round(["LOCK.RELEASE", key, owner], targets=targets, until_all=True)

        with contextlib.suppress(RuntimeError):
            self._spawn(later())

    async def settle(self) -> None:
        """Waits for the releases running in the background (call before the loop ends)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def aclose(self) -> None:
        """Releases every hold still held and waits for the background releases."""
        for h in list(self._holds):
            with contextlib.suppress(Exception):
                await h.release()
        await self.settle()

    # --- looking at locks -----------------------------------------------------------------

    async def _query_each(self, key: str, args: Sequence[Any], parse: Callable[[str, Any], T]) -> list[T]:
        out = []
        for s in self._servers:
            try:
                reply = await s.call(args, max(self.node_timeout, 1.0))
            except asyncio.TimeoutError as e:
                raise ServerError(f"lock {key!r} on {s.name}: no reply in time", key=key, servers=[s.name]) from e
            except Exception as e:  # noqa: BLE001
                raise core.server_error(key, s.name, e) from e
            out.append(parse(s.name, reply))
        return out

    async def info(self, key: str) -> LockInfo | None:
        return next((i for i in await self.info_each(key) if i is not None), None)

    async def info_each(self, key: str) -> list[LockInfo | None]:
        return await self._query_each(key, ["LOCK.INFO", key], core.parse_info)

    async def holders(self, key: str, count: int = 0) -> list[Holder]:
        lists = await self._query_each(key, ["LOCK.HOLDERS", key, "COUNT", count], core.parse_holders)
        return [h for hs in lists for h in hs]

    async def waiters(self, key: str, count: int = 0) -> list[Waiter]:
        lists = await self._query_each(key, ["LOCK.WAITERS", key, "COUNT", count], core.parse_waiters)
        return [w for ws in lists for w in ws]

    async def force_release(self, key: str, owner: str | None = None) -> int:
        args = ["LOCK.FORCERELEASE", key] + ([owner] if owner is not None else [])
        return sum(await self._query_each(key, args, lambda _s, r: int(r)))

    async def _history(self, key: str, owner: str) -> tuple[str | None, bool]:
        known = False
        for s in self._servers:
            try:
                reply = await s.call(["LOCK.HISTORY", key, 100], self.node_timeout)
            except Exception:  # noqa: BLE001
                continue
            known = True
            cause = core.parse_history(reply, owner)
            if cause:
                return cause, True
        return None, known


class _LossEvent(asyncio.Event):
    """``hold.lost``: set when the hold is known lost, and reads as set from the moment its
    validity ended (an event loop blocked past it sees it at once)."""

    def __init__(self, hold: Hold) -> None:
        super().__init__()
        self._hold = weakref.ref(hold)

    def is_set(self) -> bool:
        if super().is_set():
            return True
        h = self._hold()
        return h is not None and h._expired()


class Hold:
    """An asyncio hold: ``token``, ``tokens``, ``owner``, ``lost`` (an ``asyncio.Event``),
    ``reason``; ``check()``, ``await renew()``, ``await release()``, ``reenter()``."""

    def __init__(
        self,
        client: Relock,
        key: str,
        owner: str,
        ttl: float,
        tokens: dict[str, int],
        valid_until: float,
        mode: list[str],
    ) -> None:
        self._client = client
        self.key = key
        self.owner = owner
        self.ttl = ttl
        self.tokens = tokens
        self.token: int = next(iter(tokens.values()))
        self.valid_until = valid_until
        self.reason: str | None = None
        self.cause: str | None = None
        self.shared = bool(mode)
        self._mode = mode
        self._pid = os.getpid()
        self._released = False
        self._wake = asyncio.Event()
        self.lost: asyncio.Event = _LossEvent(self)
        self._task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(self._renew_loop())

    def __repr__(self) -> str:
        return f"Hold(key={self.key!r}, owner={self.owner!r}, token={self.token})"

    async def __aenter__(self) -> Hold:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    def _lost_at(self) -> float:
        return self.valid_until - core.loss_lead(self.ttl)

    def _expired(self) -> bool:
        if self._pid != os.getpid():
            return True
        return not self._released and time.monotonic() >= self._lost_at()

    @property
    def is_valid(self) -> bool:
        return not self._released and not self.lost.is_set()

    def _stall_reason(self) -> str:
        return (
            f"its validity ran out before it could be renewed (the event loop did not run the "
            f"renewal in time: blocked longer than the {self.ttl:g} s ttl?)"
        )

    def _lose(self, reason: str, cause: str | None = None) -> None:
        if self._released or asyncio.Event.is_set(self.lost):
            return
        self.reason = reason
        self.cause = cause
        asyncio.Event.set(self.lost)
        self._client._release_late(self.key, self.owner, None)

    def check(self) -> None:
        if self._pid != os.getpid():
            raise core.lost_error(self.key, f"the process forked: this hold belongs to process {self._pid}", None)
        if self.lost.is_set():
            if self.reason is None:
                self._lose(self._stall_reason())
            raise core.lost_error(self.key, self.reason or "its validity ran out", self.cause, self._client.servers)
        if self._released:
            raise core.lost_error(self.key, "it was released", None)

    async def _renew_loop(self) -> None:
        every = max(self.ttl / 3, 0.001)
        next_at = time.monotonic() + every
        while not self._released:
            now = time.monotonic()
            if now >= self._lost_at():
                self._lose(self._stall_reason())
                return
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, min(next_at, self._lost_at()) - now))
                return  # released
            except asyncio.TimeoutError:
                pass
            if self._released or self._pid != os.getpid():
                return
            if time.monotonic() >= self._lost_at():
                self._lose(self._stall_reason())
                return
            try:
                outcome = await asyncio.wait_for(
                    self._renew_round(self.ttl), max(0.001, self._lost_at() - time.monotonic())
                )
            except asyncio.TimeoutError:
                self._lose("its validity ran out during a renewal")
                return
            except RelockError:
                return
            every = max(self.ttl / 3, 0.001)
            if outcome:
                next_at = time.monotonic() + every
            else:
                left = max(0.0, self.valid_until - time.monotonic())
                next_at = time.monotonic() + min(every / 4, left / 2)

    async def _renew_round(self, ttl: float) -> bool:
        """One renewal round: True when renewed, False when only unanswered (try again);
        raises ``LockLost`` when the hold is gone."""
        ttl_ms = core.check_ttl(ttl)
        ttl_s = ttl_ms / 1000
        self.check()
        if time.monotonic() >= self.valid_until:
            self._lose(self._stall_reason())
            self.check()
        rnd = await self._client._round(["LOCK.RENEW", self.key, self.owner, ttl_ms])
        until = rnd.valid_until(ttl_s)
        if until is not None:
            if not self._released:
                self.ttl = ttl_s
                self.valid_until = until
            return True
        if rnd.renew_verdict() == "lost":
            refused = rnd.servers(lambda f: f.refused)
            if refused:
                what = f"LOCK.RENEW answered nil on {', '.join(refused)}: the lock expired or was taken away"
            else:
                what = f"renewal failed: {rnd.describe(lambda f: f.permanent)}"
            cause, known = await self._client._history(self.key, self.owner)
            if cause:
                what += f" ({core.describe_cause(cause)}; LOCK.HISTORY says {cause})"
            elif not known:
                what += " (the server keeps no LOCK.HISTORY, so it cannot say why)"
            self._lose(what, cause)
            self.check()
        self._last_failure = rnd.describe()
        return False

    async def renew(self, ttl: float | None = None) -> None:
        """Renews now; raises ``LockLost`` when gone, ``NotAcquired`` when servers did not
        answer (the hold stays valid until its validity ends)."""
        if not await self._renew_round(self.ttl if ttl is None else ttl):
            raise NotAcquired(f"lock {self.key!r}: renewal failed ({self._last_failure})", key=self.key)

    async def release(self) -> bool:
        """Stops the renewal and releases the hold: True when released, False when it was no
        longer held. In a forked child it does nothing (the hold is the parent's)."""
        if self._pid != os.getpid() or self._released:
            return False
        self._released = True
        self._wake.set()
        rnd = await self._client._round(["LOCK.RELEASE", self.key, self.owner], until_all=len(self.tokens) > 1)
        return rnd.won()

    async def _close(self) -> None:
        try:
            await asyncio.shield(self.release())
        except RelockError:
            pass

    @contextlib.asynccontextmanager
    async def reenter(self) -> AsyncIterator[int]:
        """A nested section under the same owner (LOCK.REENTER); yields the count."""
        self.check()
        ttl_ms = core.check_ttl(self.ttl)
        c = self._client
        rnd = await c._round(["LOCK.REENTER", self.key, self.owner, ttl_ms, *self._mode], until_all=True)
        if not rnd.won():
            await c._round(["LOCK.RELEASE", self.key, self.owner], targets=rnd.agreed_by(), until_all=True)
            if rnd.permanently_failed():
                raise rnd.permanent_error(self.key)
            raise LockLost(f"lock {self.key!r}: re-entry refused ({rnd.describe()})", key=self.key, reason="re-entry refused")
        try:
            yield int(max(rnd.agreed.values()))
        finally:
            if self._pid == os.getpid():
                await c._round(["LOCK.RELEASE", self.key, self.owner], targets=rnd.agreed_by(), until_all=True)
