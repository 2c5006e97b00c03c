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
from ._core import Failure, Holder, KeyStats, LockInfo, LogEntry, LossReason, Round, Waiter, Who
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
    "GroupHold",
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

    async def call_many(self, commands: Sequence[Sequence[Any]], timeout: float) -> list[Any]:
        """Several commands in one round trip (a pipeline), each reply or its error."""
        pipe = self.client.pipeline(transaction=False)
        for args in commands:
            pipe.execute_command(*args)
        return list(await asyncio.wait_for(pipe.execute(raise_on_error=False), timeout))

    async def call_nodes(self, args: Sequence[Any], timeout: float) -> list[tuple[str, Any]]:
        """A command without a key on every master: each cluster primary, or the server."""
        if not self.cluster:
            return [(self.name, await self.call(args, timeout))]
        reply = await asyncio.wait_for(
            self.client.execute_command(*args, target_nodes=self.client.get_primaries()), timeout
        )
        if isinstance(reply, dict):
            return [(str(k), v) for k, v in reply.items()]
        return [(self.name, reply)]


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
        permits: int | None = None,
    ) -> AsyncIterator[Hold]:
        """``async with locks.lock(key, ...) as hold``: see ``relock.Relock.lock``."""
        hold = await self._acquire(key, ttl, wait, shared, limit, permits, raise_busy=True)
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
        permits: int | None = None,
    ) -> Hold | None:
        """The ``Hold`` (renewed in the background until ``await hold.release()``), or None
        when the lock was not granted within ``wait``."""
        return await self._acquire(key, ttl, wait, shared, limit, permits, raise_busy=False)

    async def _acquire(
        self,
        key: str,
        ttl: float,
        wait: float | None,
        shared: bool,
        limit: int | None,
        permits: int | None,
        raise_busy: bool,
    ) -> Hold | None:
        ttl_ms = core.check_ttl(ttl)
        ttl_s = ttl_ms / 1000
        limit_wait = core.check_wait(wait)
        core.check_mode(shared, limit, 1 if self._servers[0].cluster else len(self._servers), permits)
        mode = core.mode_args(shared, limit, permits)
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

    async def _ask(
        self, i: int, args: Sequence[Any], timeout: float | None, accept: Callable[[Any], Any] | None = None
    ) -> tuple[Any, Failure | None]:
        try:
            reply = await self._servers[i].call(args, timeout)
            return (reply if accept is None else accept(reply)), None
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
        accept: Callable[[Any], Any] | None = None,
    ) -> Round[Any]:
        rnd: Round[Any] = Round(self._names, time.monotonic(), until_all)
        # A wait without limit has no bound; everything else is bounded by the node timeout.
        t = self.node_timeout if isinstance(timeout, str) else timeout
        if len(self._servers) == 1:
            if targets is not None and not targets[0]:
                rnd.on_reply(0, None)
            else:
                value, failure = await self._ask(0, args, t, accept)
                rnd.on_reply(0, value, failure)
            return rnd.finish(time.monotonic())
        pending: dict[asyncio.Task[tuple[Any, Failure | None]], int] = {}
        for i in range(len(self._servers)):
            if targets is not None and not targets[i]:
                rnd.on_reply(i, None)
                continue
            # Tasks of their own: a request under way when the round is decided goes on to
            # its end (a late grant lands, to be released), unless it is a wait (cut off).
            pending[self._spawn(self._ask(i, args, t, accept))] = i
        cut_at: float | None = None
        try:
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
        except BaseException:
            # Cancelled while waiting: the waits still queued are cut too (a cancelled
            # command closes its connection, which takes us out of that server's queue).
            if partial_hold is not None:
                for f in pending:
                    f.cancel()
            raise
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
        rnd = await self._round(args, timeout=bound, partial_hold=min(self.max_partial_hold, ttl_ms / 4000))
        cut = [i for i in range(len(self._servers)) if i not in rnd.answered]
        if rnd.won() and cut:
            # relock.Relock._top_up: the masters whose waits were cut are asked once more
            # (LOCK.ACQUIRE, same owner), so the hold is not left on a bare quorum.
            extra = await self._round(
                ["LOCK.ACQUIRE", key, owner, ttl_ms, *mode], targets=[i in cut for i in range(len(self._servers))], until_all=True
            )
            for i, token in extra.agreed.items():
                rnd.add_grant(i, token)
        return rnd

    async def _release_failed(self, key: str, owner: str, rnd: Round[Any]) -> None:
        now, later = rnd.give_back()
        if any(now):
            await self._round(["LOCK.RELEASE", key, owner], targets=now, until_all=True)
        if any(later):
            self._release_late(key, owner, later)

    def _release_late(self, key: str, owner: str, targets: list[bool] | None, args: list[Any] | None = None) -> None:
        release = args or ["LOCK.RELEASE", key, owner]

        async def later() -> None:
            await self._round(release, targets=targets, until_all=True)
            await asyncio.sleep(0.1)
            await self._round(release, targets=targets, until_all=True)

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

    async def history(self, key: str, count: int = 10) -> list[LogEntry]:
        """LOCK.HISTORY: the journal's entries for ``key``, newest first, on every server."""
        lists = await self._query_each(key, ["LOCK.HISTORY", key, count], core.parse_log)
        return [e for es in lists for e in es]

    async def log(self, count: int = 10) -> list[LogEntry]:
        """LOCK.LOG (admin): the journal of every key on every server (cluster: primary)."""
        return [e for name, r in await self._each_node(["LOCK.LOG", count]) for e in core.parse_log(name, r)]

    async def reset_log(self) -> None:
        """LOCK.LOG RESET on every server."""
        await self._each_node(["LOCK.LOG", "RESET"])

    async def stats(self, count: int = 10) -> list[KeyStats]:
        """LOCK.STATS (admin): the hottest keys by total wait time on every server."""
        return [k for name, r in await self._each_node(["LOCK.STATS", "COUNT", count]) for k in core.parse_stats(name, r)]

    async def _each_node(self, args: Sequence[Any]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for s in self._servers:
            try:
                out += await s.call_nodes(args, max(self.node_timeout, 1.0))
            except asyncio.TimeoutError as e:
                raise ServerError(f"{s.name}: no reply in time", servers=[s.name]) from e
            except Exception as e:  # noqa: BLE001
                raise core.server_error(None, s.name, e) from e
        return out

    async def _history(self, keys: Sequence[str], owner: str, since: float) -> LossReason:
        """Why ``owner``'s hold of ``keys`` ended, from LOCK.HISTORY (one pipelined round
        trip per server, bounded by the node timeout)."""
        asked = False
        for s in self._servers:
            try:
                replies = await s.call_many([["LOCK.HISTORY", k, 100] for k in keys], self.node_timeout)
            except Exception:  # noqa: BLE001 - no answer: the next server may know
                continue
            try:
                entries = [e for r in replies if not isinstance(r, Exception) for e in core.parse_log(s.name, r)]
            except Exception:  # noqa: BLE001 - a reply relock cannot read says nothing
                continue
            asked = asked or any(not isinstance(r, Exception) for r in replies)
            entries.sort(key=lambda e: e.time, reverse=True)
            loss = core.loss_reason(entries, owner, since, time.time())
            if loss.cause is not None:
                return loss
        if not asked:
            return LossReason(None, None, "no server answered LOCK.HISTORY, so relock cannot say why")
        return LossReason(None, None, core.UNKNOWN_LOSS)

    # --- several keys ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lock_all(
        self, keys: Sequence[str], ttl: float = core.DEFAULT_TTL, wait: float | None = None
    ) -> AsyncIterator[GroupHold]:
        """``async with locks.lock_all(keys, ...) as group``: see ``relock.Relock.lock_all``."""
        hold = await self._acquire_all(keys, ttl, wait, raise_busy=True)
        assert hold is not None
        try:
            yield hold
        finally:
            await hold._close()

    async def acquire_all(
        self, keys: Sequence[str], ttl: float = core.DEFAULT_TTL, wait: float | None = None
    ) -> GroupHold | None:
        """The ``GroupHold``, or None when the keys were not all granted within ``wait``."""
        return await self._acquire_all(keys, ttl, wait, raise_busy=False)

    def _check_slot(self, keys: list[str]) -> None:
        if not self._servers[0].cluster or len(keys) < 2:
            return
        from redis.crc import key_slot

        if len({key_slot(k.encode("utf-8")) for k in keys}) > 1:
            raise InvalidArgument("the keys of a group must share a hash slot in a Redis Cluster: give them one {hash tag}")

    async def _acquire_all(
        self, keys: Sequence[str], ttl: float, wait: float | None, raise_busy: bool
    ) -> GroupHold | None:
        group = core.check_keys(keys)
        self._check_slot(group)
        ttl_ms = core.check_ttl(ttl)
        ttl_s = ttl_ms / 1000
        limit_wait = core.check_wait(wait)
        deadline = None if limit_wait is None else time.monotonic() + limit_wait
        n = len(group)

        def tokens_of(reply: Any) -> Any:
            return core.group_tokens(group, reply)

        while True:
            owner = self.new_owner()
            release = ["LOCK.MRELEASE", n, *group, owner]
            try:
                rnd = await self._round(["LOCK.MACQUIRE", n, *group, owner, ttl_ms], accept=tokens_of)
            except asyncio.CancelledError:
                self._release_late(group[0], owner, None, release)
                raise
            until = rnd.valid_until(ttl_s)
            if until is not None:
                hold = GroupHold(self, group, owner, ttl_s, next(iter(rnd.agreed.values())), until)
                self._holds.add(hold)
                return hold
            now_, later = rnd.give_back()
            if any(now_):
                await self._round(release, targets=now_, until_all=True)
            if any(later):
                self._release_late(group[0], owner, later, release)
            if rnd.permanently_failed():
                raise rnd.permanent_error(group[0])
            if deadline is not None and time.monotonic() >= deadline:
                if raise_busy:
                    raise rnd.acquire_error(",".join(group), ttl_s, limit_wait)
                return None
            if len(self._servers) == 1 and not rnd.some_failed():
                got = await self._wait_each(group, owner, ttl_ms, deadline)
                if isinstance(got, GroupHold):
                    self._holds.add(got)
                    return got
                if got == "timeout":
                    if raise_busy:
                        raise NotAcquired(f"locks {group!r}: not all acquired within {limit_wait:g} s", key=group[0])
                    return None
                continue
            pause = core.jitter(self.retry_delay)
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(pause)

    async def _wait_each(
        self, group: list[str], owner: str, ttl_ms: int, deadline: float | None
    ) -> GroupHold | str:
        """``relock.Relock._wait_each`` for asyncio: the keys one by one in wait order."""
        ttl_s = ttl_ms / 1000
        taken: list[str] = []
        tokens: dict[str, int] = {}

        async def give_back() -> None:
            if taken:
                release = ["LOCK.MRELEASE", len(taken), *taken, owner]
                self._release_late(taken[0], owner, None, release)

        def all_of(want: int) -> Callable[[Any], Any]:
            return lambda r: r if r is not None and int(r) == want else None

        try:
            for key in core.wait_order(group):
                while True:
                    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if remaining == 0.0:
                        await give_back()
                        return "timeout"
                    piece = remaining
                    if taken:
                        piece = ttl_s / 3 if remaining is None else min(remaining, ttl_s / 3)
                    rnd = await self._wait_round(key, owner, ttl_ms, piece, [])
                    if rnd.won():
                        taken.append(key)
                        tokens[key] = int(next(iter(rnd.agreed.values())))
                        break
                    if rnd.permanently_failed():
                        await give_back()
                        raise rnd.permanent_error(key)
                    if rnd.some_failed():
                        self._release_late(key, owner, None)
                        await asyncio.sleep(min(core.jitter(self.retry_delay), remaining if remaining is not None else 1e9))
                    if taken:
                        renewal = await self._round(
                            ["LOCK.MRENEW", len(taken), *taken, owner, ttl_ms], accept=all_of(len(taken))
                        )
                        if renewal.renew_verdict() == "lost":
                            await give_back()
                            return "again"
            renewal = await self._round(["LOCK.MRENEW", len(group), *group, owner, ttl_ms], accept=all_of(len(group)))
            until = renewal.valid_until(ttl_s)
            if until is None:
                await give_back()
                return "again"
            return GroupHold(self, group, owner, ttl_s, {k: tokens[k] for k in group}, until)
        except BaseException:
            # Cancelled or failed: whatever was taken, or lands, is given back in the background.
            self._release_late(group[0], owner, None, ["LOCK.MRELEASE", len(group), *group, owner])
            raise


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
        # The largest of the masters' tokens (see relock.Hold): it grows from one holder to
        # the next, where the first master's alone can go backwards.
        self.token: int = max(tokens.values())
        self.valid_until = valid_until
        self.reason: str | None = None
        self.loss: LossReason | None = None
        self.shared = bool(mode)
        self._mode = mode
        self._since = time.time()  # granted just before: an older flush is not its end (1 s slack for clocks)
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

    @property
    def cause(self) -> str | None:
        """The server's word for the loss (``loss.cause``); None while held or unknown."""
        return None if self.loss is None else self.loss.cause

    @property
    def who(self) -> Who | None:
        """The client that ended the hold (``loss.who``), where the server could tell."""
        return None if self.loss is None else self.loss.who

    @property
    def keys(self) -> list[str]:
        return [self.key]

    def _renew_args(self, ttl_ms: int) -> list[Any]:
        return ["LOCK.RENEW", self.key, self.owner, ttl_ms]

    def _release_args(self) -> list[Any]:
        return ["LOCK.RELEASE", self.key, self.owner]

    def _all_held(self, reply: Any) -> Any:
        return reply

    def _refused_words(self, servers: list[str]) -> str:
        return f"LOCK.RENEW answered nil on {', '.join(servers)}: the lock expired or was taken away"

    def _lose(self, reason: str, loss: LossReason | None = None) -> None:
        if self._released or asyncio.Event.is_set(self.lost):
            return
        self.reason = reason
        self.loss = loss
        asyncio.Event.set(self.lost)
        self._client._release_late(self.key, self.owner, None, self._release_args())

    def check(self) -> None:
        if self._pid != os.getpid():
            raise core.lost_error(self.key, f"the process forked: this hold belongs to process {self._pid}", None)
        if self.lost.is_set():
            if self.reason is None:
                self._lose(self._stall_reason())
            raise core.lost_error(self.key, self.reason or "its validity ran out", self.loss, self._client.servers)
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

    async def _renew_round(self, ttl: float, explicit: bool = False) -> bool:
        """One renewal round: True when renewed, False when only unanswered (try again);
        raises ``LockLost`` when the hold is gone, and (``explicit``: ``renew(ttl)``)
        ``ServerError`` when the servers refused the ttl."""
        ttl_ms = core.check_ttl(ttl)
        ttl_s = ttl_ms / 1000
        self.check()
        if time.monotonic() >= self.valid_until:
            self._lose(self._stall_reason())
            self.check()
        rnd = await self._client._round(self._renew_args(ttl_ms), accept=self._all_held)
        until = rnd.valid_until(ttl_s)
        if until is not None:
            if not self._released:
                self.ttl = ttl_s
                self.valid_until = until
            return True
        if rnd.bad_ttl():
            # The servers refused the ttl and changed nothing: the hold is still ours.
            self._last_failure = rnd.describe()
            if explicit:
                raise rnd.bad_ttl_error(self.key, ttl_s, self.ttl)
            return False
        if rnd.renew_verdict() == "lost":
            await self._lose_with_history(rnd)
            self.check()
        self._last_failure = rnd.describe()
        return False

    async def _lose_with_history(self, rnd: Round[Any]) -> None:
        """The hold is gone: asks the journal why (one bounded round trip) and says it."""
        refused = rnd.servers(lambda f: f.refused)
        what = self._refused_words(refused) if refused else f"renewal failed: {rnd.describe(lambda f: f.permanent)}"
        loss = await self._client._history(self.keys, self.owner, self._since)
        where = f"key {loss.entry.key!r} " if loss.entry is not None and len(self.keys) > 1 and loss.entry.key else ""
        self._lose(f"{what}: {where}{loss.message}", loss)

    async def downgrade(self) -> None:
        """``relock.Hold.downgrade`` for asyncio: this exclusive hold becomes shared."""
        self.check()
        rnd = await self._client._round(["LOCK.DOWNGRADE", self.key, self.owner], until_all=True)
        if rnd.won():
            self.shared = True
            self._mode = ["SHARED"]
            return
        if rnd.permanently_failed():
            raise rnd.permanent_error(self.key)
        if rnd.renew_verdict() == "lost":
            await self._lose_with_history(rnd)
            self.check()
        raise NotAcquired(
            f"lock {self.key!r}: downgrade not answered by a quorum ({rnd.describe()}); retry",
            key=self.key,
            servers=rnd.servers(lambda f: not f.refused),
        )

    async def renew(self, ttl: float | None = None) -> None:
        """Renews now; raises ``LockLost`` when gone, ``NotAcquired`` when servers did not
        answer (the hold stays valid until its validity ends), ``ServerError`` (not
        retryable) when they refused the ttl (the hold is kept, with its ttl)."""
        if not await self._renew_round(self.ttl if ttl is None else ttl, explicit=True):
            raise NotAcquired(f"lock {self.key!r}: renewal failed ({self._last_failure})", key=self.key)

    async def release(self) -> bool:
        """Stops the renewal and releases the hold: True when released, False when it was no
        longer held or servers did not answer (released there again in the background);
        raises ``ServerError`` (not retryable) when servers refused it with an error
        (``NOPERM``...). In a forked child it does nothing (the hold is the parent's)."""
        if self._pid != os.getpid() or self._released:
            return False
        self._released = True
        self._wake.set()
        rnd = await self._client._round(
            self._release_args(), until_all=len(self._client.servers) > 1, accept=self._all_held
        )
        if rnd.won():
            return True
        unanswered = rnd.unanswered()
        if any(unanswered):
            self._client._release_late(self.key, self.owner, unanswered, self._release_args())
        error = rnd.release_error(self.key)
        if error is not None:
            raise error
        return False

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


class GroupHold(Hold):
    """``relock.GroupHold`` for asyncio: several keys held together by one owner, renewed
    with LOCK.MRENEW and released with LOCK.MRELEASE; ``keys``, ``key_tokens``, ``token``."""

    def __init__(
        self,
        client: Relock,
        keys: list[str],
        owner: str,
        ttl: float,
        key_tokens: dict[str, int],
        valid_until: float,
    ) -> None:
        self._keys = list(keys)
        self.key_tokens = dict(key_tokens)
        super().__init__(client, keys[0], owner, ttl, {client.servers[0]: max(key_tokens.values())}, valid_until, [])
        self.token = max(key_tokens.values())

    def __repr__(self) -> str:
        return f"GroupHold(keys={self._keys!r}, owner={self.owner!r}, token={self.token})"

    async def __aenter__(self) -> GroupHold:
        return self

    @property
    def keys(self) -> list[str]:
        return list(self._keys)

    def _renew_args(self, ttl_ms: int) -> list[Any]:
        return ["LOCK.MRENEW", len(self._keys), *self._keys, self.owner, ttl_ms]

    def _release_args(self) -> list[Any]:
        return ["LOCK.MRELEASE", len(self._keys), *self._keys, self.owner]

    def _all_held(self, reply: Any) -> Any:
        return reply if reply is not None and int(reply) == len(self._keys) else None

    def _refused_words(self, servers: list[str]) -> str:
        return f"LOCK.MRENEW found part of the group no longer held on {', '.join(servers)}"

    async def downgrade(self) -> None:
        raise InvalidArgument("a group of keys is held exclusively: downgrade is for one key")

    @contextlib.asynccontextmanager
    async def reenter(self) -> AsyncIterator[int]:
        raise InvalidArgument("a group of keys is not reentrant: hold the group once")
        yield 0  # pragma: no cover
