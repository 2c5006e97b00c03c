"""relock for ``redis.asyncio``: the same API as ``relock.Relock``, with coroutines, an
``asyncio.Event`` for ``hold.lost`` and a renewal task per hold.

    import redis.asyncio as redis, relock.aio

    locks = relock.aio.Relock(redis.Redis())
    async with locks.lock("orders:42", ttl=30, wait=5) as hold:
        await store.write(data, fence=hold.token)
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import time
import weakref
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, Sequence, TypeVar

import redis.asyncio as aredis
import redis.asyncio.cluster as acluster
import redis.exceptions as rex
from redis.asyncio.retry import Retry as ARetry
from redis.backoff import NoBackoff

from . import _core as core
from ._core import Failure, Holder, KeyStats, Leader, LeaderChange, LockInfo, LogEntry, LossReason, Round, Waiter, Who
from .errors import (
    InvalidArgument,
    LockLost,
    NotAcknowledged,
    NotAcquired,
    OtherLimit,
    OtherMode,
    RelockError,
    ServerError,
    StaleToken,
)

__all__ = [
    "GroupHold",
    "Hold",
    "Leader",
    "LeaderChange",
    "Leadership",
    "InvalidArgument",
    "LockLost",
    "NotAcknowledged",
    "NotAcquired",
    "OtherLimit",
    "OtherMode",
    "Relock",
    "RelockError",
    "ServerError",
    "StaleToken",
]

T = TypeVar("T")
WAIT_GRACE = 1.0
#: Why a hold's validity ran out unrenewed, when no renewal failed (``Hold._stall_reason``).
_NOT_RENEWED = "the event loop did not run the renewal in time: blocked longer than"


#: How long opening a connection (TCP and the handshake) may take, at least.
CONNECT_TIMEOUT = 2.0
#: How often the server is asked whether a blocked LOCK.WAIT's connection is still there.
WATCH_EVERY = 1.0


class _Server:
    """One master: a ``redis.asyncio`` client (one server, or a Redis Cluster acting as one).

    For one server relock keeps connections of its own, made like the client's pool makes
    them (same class and options: host, password, TLS, protocol, ...) but without redis-py's
    ``Retry`` and with no socket timeout of their own: a command is sent once, never again
    behind relock's back (a re-sent command whose reply was lost could apply twice), every
    command is bounded by relock's own deadline, and a blocked ``LOCK.WAIT`` is never cut by
    the driver's ``socket_timeout``. There is no bound on the number of connections: a
    renewal never waits for one behind the tasks that wait for locks (a burst closes what it
    opened beyond ``KEEP_IDLE``). A cluster client keeps its own connections and timeouts; a
    fenced write alone is sent by relock itself on one of them, once (see ``fenced``)."""

    KEEP_IDLE = 16

    def __init__(self, client: Any, node_timeout: float, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.client = client
        self._node_timeout = node_timeout
        self.cluster = isinstance(client, acluster.RedisCluster)
        self._idle: list[Any] = []
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        if self.cluster:
            self.name = "cluster"
            #: The driver's socket timeout (the cluster's connections are its own).
            self.socket_timeout: Any = getattr(client, "nodes_manager", None) and client.nodes_manager.connection_kwargs.get("socket_timeout")
            return
        pool = client.connection_pool
        kw = pool.connection_kwargs
        self.socket_timeout = kw.get("socket_timeout")
        self.name = core.server_name(kw.get("host", "localhost"), kw.get("port", 6379), kw.get("path"))
        self._connection_class = pool.connection_class
        self._connect_timeout = connect_timeout
        self._kwargs = {
            **kw,
            "retry": ARetry(NoBackoff(), 0),
            "retry_on_timeout": False,
            "retry_on_error": [],
            "health_check_interval": 0,
            "socket_timeout": None,
            "socket_connect_timeout": connect_timeout,
        }

    async def _checkout(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._pid != os.getpid() or self._loop is not loop:
            # A forked child (the parent's sockets are not ours) or another event loop (the
            # connections of a closed one cannot be used): start afresh.
            self._idle, self._pid, self._loop = [], os.getpid(), loop
        while self._idle:
            conn = self._idle.pop()
            # An idle connection with something to read was closed by the server.
            try:
                # can_read_destructive in redis-py before 8, can_read since.
                peek = getattr(conn, "can_read", None) or conn.can_read_destructive
                if conn.is_connected and not await peek():
                    return conn
            except Exception:  # noqa: BLE001
                pass
            await _drop(conn)
        conn = self._connection_class(**self._kwargs)
        try:
            await _within(conn.connect(), self._connect_timeout)
        except BaseException:
            await _drop(conn)
            raise
        return conn

    def _checkin(self, conn: Any) -> None:
        if self._pid == os.getpid() and len(self._idle) < self.KEEP_IDLE:
            self._idle.append(conn)
        else:
            _drop_soon(conn)

    async def _run(
        self, args: Sequence[Any], timeout: float | None, undo: Sequence[Any] | None = None, acks: tuple[int, float] | None = None
    ) -> Any:
        """``args`` on a connection of relock's, all of it within ``timeout`` (None: no bound).
        ``undo``: the command that takes ``args`` back when no reply comes in time, sent on the
        same connection (so the server runs it after ``args``, if it runs ``args`` at all).
        ``acks``: a reply that is not nil is followed by ``WAIT`` (see ``_acked``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if timeout is None:
            conn = await self._checkout()
        else:
            conn = await _within(self._checkout(), timeout)
        try:
            await conn.send_command(*args, check_health=False)
            if deadline is None:
                reply = await conn.read_response()
            elif undo is None:
                reply = await asyncio.wait_for(conn.read_response(), max(0.001, deadline - time.monotonic()))
            else:
                read = asyncio.ensure_future(conn.read_response())
                try:
                    reply = await asyncio.wait_for(asyncio.shield(read), max(0.001, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    await self._undo(conn, read, undo)
                    raise
        except (rex.ResponseError, _TakenBack):
            self._checkin(conn)  # an error reply: the connection is fine
            raise
        except BaseException:
            # Timed out, cancelled or broken: the connection is closed, so that no reply of
            # it is read by another command, and a blocked wait leaves the server's queue.
            await _drop(conn)
            raise
        if acks is not None and reply is not None:
            return await self._acked(conn, reply, acks)
        self._checkin(conn)
        return reply

    async def _acked(self, conn: Any, reply: Any, acks: tuple[int, float], node: Any = None) -> Any:
        """``relock._sync._Server._acked``: ``WAIT replicas timeout_ms`` on the write's
        connection; the write is never sent again, and a WAIT that fails or gets no answer
        counts as no acknowledgement. Returns ``reply``, or raises ``core.NotAcked``.
        ``node``: the cluster node the connection goes back to, instead of relock's own."""
        master = None if node is None else f"{node.host}:{node.port}"

        async def give_back(broken: bool) -> None:
            if node is not None:
                await _release_cluster(node, conn, broken)
            elif broken:
                await _drop(conn)
            else:
                self._checkin(conn)

        wanted, timeout = acks
        try:
            await conn.send_command(*core.wait_args(acks), check_health=False)
            acked = int(await _within(conn.read_response(), timeout + max(self._node_timeout, 0.1)))
        except rex.ResponseError as e:
            await give_back(False)
            raise core.NotAcked(reply, 0, wanted, f"WAIT refused: {core.error_text(e)}", master) from e
        except Exception as e:  # noqa: BLE001 - the write stands; only its acknowledgement is unknown
            await give_back(True)
            raise core.NotAcked(reply, 0, wanted, f"WAIT got no answer: {core.error_text(e) or type(e).__name__}", master) from e
        except BaseException:
            await give_back(True)
            raise
        await give_back(False)
        if acked < wanted:
            raise core.NotAcked(reply, acked, wanted, master=master)
        return reply

    async def _undo(self, conn: Any, read: asyncio.Future[Any], undo: Sequence[Any]) -> None:
        """No reply in time: ``undo`` goes on the same connection, and both replies are read
        for a little while; the connection is closed when they do not come (both commands
        are with the server by then, in order). Raises ``_TakenBack`` (the connection is
        fine: the caller keeps it) or TimeoutError."""
        try:
            await conn.send_command(*undo, check_health=False)

            async def both() -> None:
                with contextlib.suppress(rex.ResponseError):
                    await read
                with contextlib.suppress(rex.ResponseError):
                    await conn.read_response()

            await asyncio.wait_for(both(), max(self._node_timeout, 0.1))
        except BaseException:
            read.cancel()
            await _drop(conn)
            raise asyncio.TimeoutError(f"no reply in time from {self.name}") from None
        raise _TakenBack(f"no reply in time from {self.name}: the command was taken back ({undo[0]})")

    async def _run_watched(self, args: Sequence[Any], acks: tuple[int, float] | None = None) -> Any:
        """A blocking wait whose connection is watched, as relock.Relock's are (see
        relock._sync._Server._watched): a connection that died silently fails the wait as a
        lost connection (the caller waits again) instead of waiting for ever."""
        conn = await self._checkout()
        read: asyncio.Future[Any] | None = None
        watch: asyncio.Future[str] | None = None
        try:
            await conn.send_packed_command(conn.pack_commands([["CLIENT", "ID"], list(args)]), check_health=False)
            cid: int | None
            try:
                cid = int(await _within(conn.read_response(), max(1.0, self._connect_timeout)))
            except rex.ResponseError:
                cid = None
            read = asyncio.ensure_future(conn.read_response())
            watch = asyncio.ensure_future(self._watch(cid))
            await asyncio.wait([read, watch], return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                raise rex.ConnectionError(f"{self.name}: the waiting connection died silently ({watch.result()})")
            reply = read.result()
        except rex.ResponseError:
            self._checkin(conn)
            raise
        except BaseException:
            await _drop(conn)
            raise
        finally:
            for f in (read, watch):
                if f is not None and not f.done():
                    f.cancel()
                    with contextlib.suppress(BaseException):
                        await f
        if acks is not None and reply is not None:
            return await self._acked(conn, reply, acks)
        self._checkin(conn)
        return reply

    async def _watch(self, cid: int | None) -> str:
        """Returns once the waiting connection ``cid`` counts as dead, saying why."""
        within = max(WATCH_EVERY, self._node_timeout)
        answered = unanswered = 0
        while True:
            await asyncio.sleep(WATCH_EVERY if answered == 0 else within)
            seen = "blocked"
            if cid is None:
                try:
                    await self.call(["PING"], within)
                except Exception:  # noqa: BLE001
                    seen = "unknown"
            else:
                try:
                    seen = core.client_list_state(core.text(await self.call(["CLIENT", "LIST", "ID", cid], within)) or "")
                except rex.ResponseError:
                    cid = None  # CLIENT forbidden: the server alone is checked from now on
                except Exception:  # noqa: BLE001
                    seen = "unknown"
            if seen == "blocked":
                answered = unanswered = 0
                continue
            if seen == "answered":
                answered, unanswered = answered + 1, 0
                dead = answered >= 2
            elif seen == "gone":
                dead = True
            else:
                answered, unanswered = 0, unanswered + 1
                dead = unanswered >= 3
            if dead:
                if cid is not None:
                    with contextlib.suppress(Exception):
                        await self.call(["CLIENT", "KILL", "ID", cid], within)
                return seen

    async def call(
        self, args: Sequence[Any], timeout: float | None, undo: Sequence[Any] | None = None, acks: tuple[int, float] | None = None
    ) -> Any:
        if self.cluster:
            if acks is not None:
                return await self._cluster_acked(args, timeout, acks)
            if timeout is None:
                return await self.client.execute_command(*args)
            return await asyncio.wait_for(self.client.execute_command(*args), timeout)
        watched = str(args[0]).upper() == "LOCK.WAIT" and (timeout is None or timeout > 2 * WATCH_EVERY)
        if not watched:
            return await self._run(args, timeout, undo, acks)
        if timeout is None:
            return await self._run_watched(args, acks)
        return await asyncio.wait_for(self._run_watched(args, acks), timeout)

    async def fenced(self, key: str, args: Sequence[Any], timeout: float) -> Any:
        """``args`` (a ``LOCK.FENCED``, or a ``LOCK.FORCERELEASE``: a command of ``key`` not
        safe to run twice) sent at most once, within ``timeout``: once it may have left, no
        reply in time or a connection that ended first raises ``core.Unanswered`` and it is
        never sent again (redis-py's cluster client would send it again after a connection
        error or its socket timeout, and the write would apply twice). A cluster follows a
        refusal that says the node did not run it (``MOVED``, ``ASK``, ``TRYAGAIN``,
        ``CLUSTERDOWN``, ``READONLY``, ``MASTERDOWN``) to the key's master, and opens a
        connection again when opening one failed (nothing was sent)."""
        deadline = time.monotonic() + timeout
        if self.cluster:
            return await self._fenced_cluster(key, args, deadline)
        conn = await _within(self._checkout(), timeout)
        try:
            await conn.send_command(*args, check_health=False)
            reply = await asyncio.wait_for(conn.read_response(), max(0.001, deadline - time.monotonic()))
        except rex.ResponseError:
            self._checkin(conn)
            raise
        except BaseException as e:
            await _drop(conn)
            if (u := core.unanswered(e)) is None:
                raise
            raise u from e
        self._checkin(conn)
        return reply

    async def _cluster_acked(self, args: Sequence[Any], timeout: float | None, acks: tuple[int, float]) -> Any:
        """``relock._sync._Server._cluster_acked``: the write on a connection of the key's
        master, ``WAIT`` after it there; never sent again once it may have run."""
        deadline = time.monotonic() + (core.MAX_MS / 1000 if timeout is None else timeout)
        try:
            return await self._fenced_cluster(core.acked_key(args), args, deadline, acks)
        except core.Unanswered as e:
            raise rex.TimeoutError(f"{self.name}: {args[0]} {e.why}") from e

    async def role(self, key: str, timeout: float) -> Any:
        """``ROLE`` of ``key``'s master: the server, or the cluster node that serves it."""
        if not self.cluster:
            return await self.call(["ROLE"], timeout)
        node = core.node_of(self.client, key)
        if node is None:
            return None
        return await asyncio.wait_for(self.client.execute_command("ROLE", target_nodes=node), timeout)

    async def _fenced_cluster(self, key: str, args: Sequence[Any], deadline: float, acks: tuple[int, float] | None = None) -> Any:
        client = self.client
        # A client's first command: its map of the slots is read first.
        await _within(client.initialize(), max(0.001, deadline - time.monotonic()))
        node = core.node_of(client, key)
        asking = False
        for _ in range(core.FENCED_REDIRECTS):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if node is None:
                await _within(client.nodes_manager.initialize(), left)
                node = core.node_of(client, key)
                if node is None:
                    raise rex.ClusterError(f"no master serves the slot of {key!r}")
            conn = node.acquire_connection()
            try:
                # Nothing sent yet: a connection that cannot be opened is tried again.
                peek = getattr(conn, "can_read", None) or conn.can_read_destructive
                if conn.is_connected and await peek():
                    await conn.disconnect()
                if not conn.is_connected:
                    await _within(conn.connect(), left)
            except (rex.ConnectionError, rex.TimeoutError, OSError, asyncio.TimeoutError):
                await _release_cluster(node, conn, broken=True)
                node = None
                await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
                continue
            except BaseException:
                await _release_cluster(node, conn, broken=True)
                raise
            try:
                if asking:
                    await conn.send_packed_command(conn.pack_commands([["ASKING"], list(args)]), check_health=False)
                    await asyncio.wait_for(conn.read_response(), max(0.001, deadline - time.monotonic()))
                else:
                    await conn.send_packed_command(conn.pack_command(*args), check_health=False)
                reply = await asyncio.wait_for(conn.read_response(), max(0.001, deadline - time.monotonic()))
            except core.NOT_RUN as e:
                await _release_cluster(node, conn)
                if core.not_run_here(e, acks):
                    raise
                asking = isinstance(e, rex.AskError) and not isinstance(e, rex.MovedError)
                if isinstance(e, rex.AskError) and asking:
                    host, port = core.remap(client, e.host, e.port)
                    node = client.get_node(host=host, port=port)
                    if node is None:
                        raise
                elif isinstance(e, rex.TryAgainError):
                    await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                else:
                    if not isinstance(e, rex.MovedError):  # CLUSTERDOWN, READONLY, MASTERDOWN
                        await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
                    await _within(client.nodes_manager.initialize(), max(0.001, deadline - time.monotonic()))
                    node = core.node_of(client, key)
                continue
            except rex.ResponseError:
                await _release_cluster(node, conn)
                raise
            except BaseException as e:
                await _release_cluster(node, conn, broken=True)
                if (u := core.unanswered(e)) is None:
                    raise
                raise u from e
            if acks is not None and reply is not None:
                return await self._acked(conn, reply, acks, node)
            await _release_cluster(node, conn)
            return reply
        raise rex.TimeoutError(f"no master of {key!r} took the command in time (it was refused, not run)")

    async def call_many(self, commands: Sequence[Sequence[Any]], timeout: float) -> list[Any]:
        """Several commands in one round trip (a pipeline), each reply or its error."""
        if self.cluster:
            pipe = self.client.pipeline(transaction=False)
            for args in commands:
                pipe.execute_command(*args)
            return list(await asyncio.wait_for(pipe.execute(raise_on_error=False), timeout))

        async def run() -> list[Any]:
            conn = await self._checkout()
            out: list[Any] = []
            try:
                await conn.send_packed_command(conn.pack_commands([list(a) for a in commands]), check_health=False)
                for _ in commands:
                    try:
                        out.append(await conn.read_response())
                    except rex.ResponseError as e:
                        out.append(e)
            except BaseException:
                await _drop(conn)
                raise
            self._checkin(conn)
            return out

        return await asyncio.wait_for(run(), timeout)

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

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _drop(conn)


class _TakenBack(asyncio.TimeoutError):
    """No reply in time, and the command was taken back on its connection (kept open)."""


async def _within(aw: Awaitable[T], timeout: float) -> T:
    """``asyncio.wait_for`` without the lost cancellation of Python before 3.12: there, a
    task cancelled in the same step as ``aw`` completes gets ``aw``'s result and goes on as if
    never cancelled (cpython gh-86296). A cancelled Redlock wait then went on to send its
    ``LOCK.WAIT`` and sat in a master's queue with nobody to cut it (seen: the cancelled wait
    still queued on one master of three after 5 s, under load). Here a cancellation always
    raises, and ``aw`` is cancelled with it."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    if not done:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise asyncio.TimeoutError
    return task.result()


async def _release_cluster(node: Any, conn: Any, broken: bool = False) -> None:
    """Hands a connection back to its cluster node's pool; ``broken``: closed first (a reply
    of it may still come, and no other command must read it)."""
    if broken:
        await _drop(conn)
    release = getattr(node, "release", None)
    if release is not None:
        release(conn)
    else:  # an older redis-py (no ClusterNode.release)
        node._free.append(conn)


async def _drop(conn: Any) -> None:
    """Closes a connection, best effort, without waiting for the peer."""
    with contextlib.suppress(BaseException):
        await conn.disconnect(nowait=True)


def _drop_soon(conn: Any) -> None:
    with contextlib.suppress(RuntimeError):
        asyncio.get_running_loop().create_task(_drop(conn))


_clients: weakref.WeakSet[Relock] = weakref.WeakSet()


def _release_at_exit() -> None:
    """Holds still held when the interpreter exits (an event loop closed without cancelling
    their renewal tasks, which release them): each is signalled, then released on an event
    loop of its own, bounded by the node timeout."""
    holds = [h for c in list(_clients) for h in list(c._holds) if not h._released and h._pid == os.getpid()]
    if not holds:
        return

    async def end_all() -> None:
        await asyncio.gather(*(h._end("the interpreter is exiting") for h in holds), return_exceptions=True)

    with contextlib.suppress(BaseException):
        asyncio.run(end_all())


atexit.register(_release_at_exit)


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
        replica_acks: int = 0,
        replica_ack_timeout: float = core.DEFAULT_REPLICA_ACK_TIMEOUT,
    ) -> None:
        clients = list(client) if isinstance(client, (list, tuple)) else [client]
        if not clients:
            raise InvalidArgument("no servers given")
        self._acks = core.check_acks(replica_acks, replica_ack_timeout)
        if len(clients) > 1 and any(isinstance(c, acluster.RedisCluster) for c in clients):
            raise InvalidArgument("Redlock takes independent masters; pass a RedisCluster alone")
        if not node_timeout >= 0.001:
            raise InvalidArgument(f"node_timeout {node_timeout!r} is below 1 ms: every request would time out")
        self._servers = [_Server(c, float(node_timeout), max(float(node_timeout), CONNECT_TIMEOUT)) for c in clients]
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
        self.retry_delay = core.check_pause("retry_delay", retry_delay)
        self.max_partial_hold = core.check_pause("max_partial_hold", max_partial_hold)
        self._background: set[asyncio.Task[Any]] = set()
        # (key, owner) -> the steps of that hold's count being given back in the background.
        self._late_steps: dict[tuple[str, str], int] = {}
        self._holds: weakref.WeakSet[Hold] = weakref.WeakSet()
        _clients.add(self)

    @property
    def servers(self) -> list[str]:
        """The servers, as ``host:port`` (a cluster: ``cluster[seed,...]``)."""
        return list(self._names)

    @property
    def quorum(self) -> int:
        return core.quorum(len(self._servers))

    def new_owner(self) -> str:
        """A fresh owner, ``<prefix>/<random>``."""
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
        """Holds ``key`` for the ``async with`` block: acquires it, waiting up to ``wait`` seconds
        (None: no limit; 0: try once), renews it every ttl/3 in the background, and releases
        it on exit. ``shared=True`` takes a shared hold (a read lock), ``limit=n`` a permit of
        an n-permit semaphore (one server or a cluster only), ``permits=p`` (with a limit) p
        of them at once. Raises ``NotAcquired`` when the
        lock was not granted in time; check ``hold.lost`` (or call ``hold.check()``) in long
        work."""
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
        """Like ``lock()`` without the ``async with``: the ``Hold`` (renewed in the background until
        ``hold.release()``), or None when the lock was not granted within ``wait``."""
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
        owner_of: Callable[[], str] | None = None,
        make: type[Hold] | None = None,
    ) -> Hold | None:
        core.check_key(key)
        ttl_ms = core.check_ttl(ttl)
        ttl_s = ttl_ms / 1000
        limit_wait = core.check_wait(wait)
        core.check_mode(shared, limit, 1 if self._servers[0].cluster else len(self._servers), permits)
        mode = core.mode_args(shared, limit, permits)
        deadline = None if limit_wait is None else time.monotonic() + limit_wait
        while True:
            owner = self.new_owner() if owner_of is None else owner_of()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                if remaining == 0.0:
                    rnd = await self._round(["LOCK.ACQUIRE", key, owner, ttl_ms, *mode])
                else:
                    rnd = await self._wait_round(key, owner, ttl_ms, remaining, mode)
                until = rnd.valid_until(ttl_s)
                if rnd.granted_late(ttl_s):
                    # Granted after a long wait: the ttl counts from a grant we did not see, so
                    # measure the validity with a renewal.
                    renewal = await self._round(["LOCK.RENEW", key, owner, ttl_ms])
                    until = renewal.valid_until(ttl_s)
                    if until is None:
                        rnd = renewal
                if until is not None:
                    tokens = {self._names[i]: int(t) for i, t in sorted(rnd.agreed.items())}
                    return (make or Hold)(self, key, owner, ttl_s, tokens, until, mode)
                await self._release_failed(key, owner, rnd, ttl_s)
            except BaseException:
                # Cancelled (asyncio), interrupted (KeyboardInterrupt, SystemExit from a signal
                # handler) or failed anywhere from the request to the Hold (a late grant's
                # renewal included): the waits were cut (their connections closed, so no
                # server keeps this owner queued); whatever was granted, or lands still, is
                # given back in the background.
                self._give_back(key, owner, ttl_s)
                raise
            passed = deadline is not None and time.monotonic() >= deadline
            failure = rnd.after_failed(key, ttl_s, limit_wait, passed, bounded=remaining is not None)
            if failure is not None:
                # acquire() returns None for a lock not granted in time, never for a grant
                # its replicas did not acknowledge (NotAcknowledged): that one is raised.
                if raise_busy or not isinstance(failure, NotAcquired) or isinstance(failure, NotAcknowledged):
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
        self,
        i: int,
        args: Sequence[Any],
        timeout: float | None,
        accept: Callable[[Any], Any] | None = None,
        undo: Sequence[Any] | None = None,
    ) -> tuple[Any, Failure | None]:
        acks = self._acks if self._acks is not None and str(args[0]).upper() in core.ACKED else None
        try:
            reply = await self._servers[i].call(args, timeout, undo, acks)
            return (reply if accept is None else accept(reply)), None
        except core.NotAcked as e:
            return await self._not_acked(i, args, e, accept)
        except asyncio.TimeoutError:
            return None, Failure(f"no reply within {timeout} s", timeout=True)
        except Exception as e:  # noqa: BLE001
            return None, core.classify(e, self._servers[i].cluster)

    async def _not_acked(
        self, i: int, args: Sequence[Any], e: core.NotAcked, accept: Callable[[Any], Any] | None
    ) -> tuple[Any, Failure | None]:
        """A write of master ``i`` that its replicas did not acknowledge (``replica_acks``):
        a grant, or a re-entry's level, is taken back there at once (``core.undo_grant``, in
        the background only when that gets no answer: a give-back repeated later could end a
        new grant of the same owner) and the master counts as failed; a renewal does not
        count, except on a master left with fewer replicas connected than asked once all of
        them acknowledged it (the promoted replica after a failover: that master holds the
        only copy anyway)."""
        assert self._acks is not None
        value = e.reply if accept is None else accept(e.reply)
        if value is None:
            return None, None  # refused after all (a group renewal that found part gone)
        s = self._servers[i]
        if str(args[0]).upper() in core.RENEWALS:
            with contextlib.suppress(Exception):
                connected = core.connected_replicas(await s.role(core.acked_key(args), self.node_timeout))
                if connected is not None and connected < e.wanted and e.acked >= connected:
                    core.log.warning(
                        "relock: renewed on %s with %d of %d replica acknowledgements: only %d replicas are connected",
                        s.name, e.acked, e.wanted, connected,
                    )
                    return value, None
            return None, core.acks_failure(e, self._acks[1], "the renewal does not count")
        undo = core.undo_grant(args, e.reply)
        what = "the re-entry was taken back there" if str(args[0]).upper() == "LOCK.REENTER" else "the grant was released again there"
        try:
            await s.call(undo, self.node_timeout)
        except Exception:  # noqa: BLE001 - asked again in the background
            self._release_late(core.acked_key(args), str(undo[-3]), [j == i for j in range(len(self._servers))], undo)
            return None, core.acks_failure(e, self._acks[1], f"{what} (in the background: no answer yet)")
        return None, core.acks_failure(e, self._acks[1], what, settled=True)

    def _ack_time(self, args: Sequence[Any]) -> float:
        """How long ``args`` may wait for replica acknowledgements after its reply."""
        return self._acks[1] if self._acks is not None and str(args[0]).upper() in core.ACKED else 0.0

    async def _round(
        self,
        args: Sequence[Any],
        targets: Sequence[bool] | None = None,
        until_all: bool = False,
        timeout: float | None | Literal["node"] = "node",
        partial_hold: float | None = None,
        accept: Callable[[Any], Any] | None = None,
        undo: Sequence[Any] | None = None,
        background: bool = False,
    ) -> Round[Any]:
        """``args`` on every server (those ``targets`` selects), each request a task of its
        own. ``background`` (a background release's round) changes nothing here: unlike
        relock.Relock's worker pools, no request ever queues behind another."""
        rnd: Round[Any] = Round(self._names, time.monotonic(), until_all)
        # A wait without limit has no bound; everything else is bounded by the node timeout
        # (and the replica acknowledgements' wait, for a write that waits for them).
        t = self.node_timeout + self._ack_time(args) if isinstance(timeout, str) else timeout
        if len(self._servers) == 1:
            if targets is not None and not targets[0]:
                rnd.on_reply(0, None)
            else:
                value, failure = await self._ask(0, args, t, accept, undo)
                rnd.on_reply(0, value, failure)
            return rnd.finish(time.monotonic())
        pending: dict[asyncio.Task[tuple[Any, Failure | None]], int] = {}
        for i in range(len(self._servers)):
            if targets is not None and not targets[i]:
                rnd.on_reply(i, None)
                continue
            # Tasks of their own: a request under way when the round is decided goes on to
            # its end (a late grant lands, to be released), unless it is a wait (cut off).
            pending[self._spawn(self._ask(i, args, t, accept, undo))] = i
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
        bound = None if remaining is None else remaining + WAIT_GRACE + self.node_timeout + self._ack_time(args)
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

    async def _release_failed(self, key: str, owner: str, rnd: Round[Any], ttl: float) -> None:
        """A failed round's grants given back, under its owner, which asks for nothing again
        (a fresh owner's grant: count 1, so ``FROM 1``)."""
        now, later = rnd.give_back()
        if any(now):
            done = await self._round(["LOCK.RELEASE", key, owner, "FROM", 1], targets=now, until_all=True)
            unanswered = done.unanswered()
            if any(unanswered):
                self._release_late(key, owner, unanswered, ttl=ttl)
        if any(later):
            self._release_late(key, owner, later, ttl=ttl)

    def _give_back(self, key: str, owner: str, ttl: float | None = None) -> None:
        """An acquisition cut short (cancelled, interrupted): whatever ``owner`` was granted,
        or may yet be, is released in the background, asked again until every server
        answered or the lease would have ended."""
        with contextlib.suppress(BaseException):
            self._release_late(key, owner, None, ttl=ttl)

    def _release_late(
        self, key: str, owner: str, targets: list[bool] | None, args: list[Any] | None = None, ttl: float | None = None
    ) -> None:
        """Gives ``owner``'s grants back in the background: every server of ``targets`` is asked
        until it answered, or until the lease (``ttl`` from now at most) would have ended
        anyway; and once more a little later (a request still under way may land), so
        ``owner`` must ask for nothing again (that later give-back would end its new grant).
        ``args``: the release, when not ``LOCK.RELEASE key owner FROM 1`` (a fresh grant)."""
        release = args or ["LOCK.RELEASE", key, owner, "FROM", 1]
        until = time.monotonic() + (core.DEFAULT_TTL if ttl is None else ttl)
        # A step of a hold's count: its next section's entry waits for it (Hold._settle_steps)
        # until it is done, repeat included; or, with several masters, when its first try left
        # one unanswered (down: a Redlock hold goes on without it, and a count it gets wrong
        # is outvoted), until that first try ended, so that it does not hold up every entry
        # for the ttl. With one server the entry needs that server anyway: it waits.
        step = core.count_step(release)
        if step is not None:
            self._late_steps[step] = self._late_steps.get(step, 0) + 1
        pending = [step is not None]

        def settled() -> None:
            if step is not None and pending[0]:
                pending[0] = False
                self._late_steps[step] -= 1
                if not self._late_steps[step]:
                    del self._late_steps[step]

        async def later() -> None:
            try:
                await self._give_back_until(release, targets, until, settled if len(self._servers) > 1 else None)
                await asyncio.sleep(0.1)
                await self._give_back_until(release, targets, until)
            finally:
                settled()

        try:
            self._spawn(later())
        except RuntimeError:  # no event loop running: nothing is given back
            settled()

    async def _give_back_until(
        self, release: list[Any], targets: list[bool] | None, until: float, unanswered: Callable[[], None] | None = None
    ) -> None:
        """``release`` on ``targets`` until each answered or ``until`` passed; ``unanswered``
        is called when the first try left a server without an answer."""
        left = [True] * len(self._servers) if targets is None else list(targets)
        pause = 0.02
        first = True
        while any(left):
            rnd = await self._round(release, targets=left, until_all=True, background=True)
            left = [a and u for a, u in zip(left, rnd.unanswered())]
            if first and any(left) and unanswered is not None:
                unanswered()
            first = False
            if not any(left) or time.monotonic() + pause >= until:
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def settle(self) -> None:
        """Waits for the releases running in the background (call before the loop ends)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def aclose(self) -> None:
        """Releases every hold still held, each signalled first (``hold.lost`` set, with the
        reason), waits for the background releases and closes relock's connections."""
        for h in list(self._holds):
            with contextlib.suppress(Exception):
                await h._end("the client was closed (aclose()) and released it")
        await self.settle()
        for s in self._servers:
            await s.close()

    # --- looking at locks -----------------------------------------------------------------

    async def _query_each(self, key: str, args: Sequence[Any], parse: Callable[[str, Any], T], once: bool = False) -> list[T]:
        """``args`` on every server, each reply parsed. ``once``: a command not safe to run
        twice, sent as a fenced write is (``_Server.fenced``: never again once it may have
        left, whatever the driver would do); a lost reply raises at once."""
        out = []
        for s in self._servers:
            try:
                if once:
                    reply = await s.fenced(key, args, max(self.node_timeout, 1.0))
                else:
                    reply = await s.call(args, max(self.node_timeout, 1.0))
            except core.Unanswered as e:
                raise core.fenced_unanswered(key, s.name, e, str(args[0])) from e
            except Exception as e:  # noqa: BLE001
                raise core.server_error(key, s.name, e) from e
            out.append(parse(s.name, reply))
        return out

    async def info(self, key: str) -> LockInfo | None:
        """LOCK.INFO: the lock at ``key``, or None. With Redlock, the first server's that has
        one (``info_each`` gives every server's)."""
        return next((i for i in await self.info_each(key) if i is not None), None)

    async def info_each(self, key: str) -> list[LockInfo | None]:
        """LOCK.INFO on every server, in the client's order."""
        return await self._query_each(key, ["LOCK.INFO", key], core.parse_info)

    async def holders(self, key: str, count: int = 0) -> list[Holder]:
        """LOCK.HOLDERS: who holds ``key``, in grant order (``count`` 0: all), on every server."""
        lists = await self._query_each(key, ["LOCK.HOLDERS", key, "COUNT", count], core.parse_holders)
        return [h for hs in lists for h in hs]

    async def waiters(self, key: str, count: int = 0) -> list[Waiter]:
        """LOCK.WAITERS: who waits for ``key``, in queue order, on every server. A server
        without LOCK.WAITERS (a module older than it) raises ``ServerError``."""
        lists = await self._query_each(key, ["LOCK.WAITERS", key, "COUNT", count], core.parse_waiters)
        return [w for ws in lists for w in ws]

    async def force_release(self, key: str, owner: str | None = None) -> int:
        """LOCK.FORCERELEASE on every server: removes every hold of ``key`` (or only
        ``owner``'s) and returns how many were removed in all. For operators. Sent at most
        once to each server, as a fenced write is: run again after its reply was lost, it
        would remove a hold another owner took since (redis-py's cluster client re-sent it).
        A reply lost (no reply in time, or the connection ended first) raises
        ``ServerError`` saying it may have run and was not sent again: look (``holders``)
        before you force-release again."""
        args = ["LOCK.FORCERELEASE", key] + ([owner] if owner is not None else [])
        return sum(await self._query_each(key, args, lambda _s, r: int(r), once=True))

    async def history(self, key: str, count: int = 10) -> list[LogEntry]:
        """LOCK.HISTORY: the journal's entries for ``key`` (holds that ended other than by
        their owner, and flushes), newest first, on every server."""
        lists = await self._query_each(key, ["LOCK.HISTORY", key, count], core.parse_log)
        return [e for es in lists for e in es]

    async def log(self, count: int = 10) -> list[LogEntry]:
        """LOCK.LOG (an admin command): the journal of every key, newest first, on every
        server (every primary of a cluster)."""
        return [e for name, r in await self._each_node(["LOCK.LOG", count]) for e in core.parse_log(name, r)]

    async def reset_log(self) -> None:
        """LOCK.LOG RESET on every server: empties the journals."""
        await self._each_node(["LOCK.LOG", "RESET"])

    async def stats(self, count: int = 10) -> list[KeyStats]:
        """LOCK.STATS (an admin command): the hottest keys by total wait time on every server,
        hottest first on each."""
        return [k for name, r in await self._each_node(["LOCK.STATS", "COUNT", count]) for k in core.parse_stats(name, r)]

    async def _each_node(self, args: Sequence[Any]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for s in self._servers:
            try:
                out += await s.call_nodes(args, max(self.node_timeout, 1.0))
            except Exception as e:  # noqa: BLE001
                raise core.server_error(None, s.name, e) from e
        return out

    async def _history(self, keys: Sequence[str], owner: str, since: float) -> LossReason:
        """Why ``owner``'s hold of ``keys`` ended, from LOCK.HISTORY: one pipelined round trip
        per server (at most the node timeout each), stopping at the first that knows."""
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

    # --- elections ------------------------------------------------------------------------

    async def campaign(self, key: str, value: str, ttl: float = core.DEFAULT_TTL, timeout: float | None = None) -> Leadership:
        """Stands for leader of the election ``key`` as ``value`` (a name, an address) and
        returns once this candidate leads: ``LOCK.WAIT`` with the owner ``<value>/<random>``,
        candidates served in arrival order, waiting up to ``timeout`` seconds (None: no
        limit; ``NotAcquired`` when it passes, and the candidate leaves the queue). The
        ``Leadership`` is a hold: ``term`` (its fencing token: hand it to whatever the leader
        writes), ``lost`` and ``reason`` (renewed every ttl/3 in the background),
        ``await resign()``. One master or a cluster only, and an exclusive key (``InvalidArgument``
        over Redlock masters, ``ServerError`` on a shared key). With ``replica_acks``, it
        returns only once that many replicas acknowledged the grant; a grant they did not
        acknowledge is released and ``NotAcknowledged`` raised."""
        core.check_key(key)
        core.check_election(key, len(self._servers), "campaign")
        core.candidate_owner(value)
        # A shared key is refused here (ServerError); one that turns shared after this look
        # queues the candidate behind its readers, as any exclusive wait.
        await self._leader(key)
        hold = await self._acquire(
            key, ttl, timeout, False, None, None, raise_busy=True, owner_of=lambda: core.candidate_owner(value), make=Leadership
        )
        assert isinstance(hold, Leadership)
        return hold

    async def leader(self, key: str) -> Leader | None:
        """The leader of the election ``key`` (LOCK.INFO): its ``value``, ``term``, ``owner``,
        ``ttl`` left and the candidates queued (``waiters``); None when nobody leads."""
        core.check_key(key)
        core.check_election(key, len(self._servers), "leader")
        return await self._leader(key)

    async def _leader(self, key: str) -> Leader | None:
        return (await self._query_each(key, ["LOCK.INFO", key], lambda name, r: core.parse_leader(key, name, r)))[0]

    async def observe(self, key: str) -> AsyncIterator[LeaderChange]:
        """The leaders of the election ``key`` as they change, for ``async for``: first the
        leader now (a ``LeaderChange`` whose ``leader`` is None when nobody leads), then one
        item after each change seen, with the latest leader (not every term between two
        wake-ups). ``term_regressed`` marks a term lower than the last one seen (the store lost
        history). Each wait is a finite ``LOCK.OBSERVE`` (5 s at most, or half the
        driver's ``socket_timeout``), asked again on a timeout or a lost connection without
        reporting a change."""
        core.check_key(key)
        core.check_election(key, len(self._servers), "observe")
        s = self._servers[0]
        every = core.observe_every(s.socket_timeout)
        seen = core.Observation(key)
        while True:
            args: list[Any] = ["LOCK.INFO", key]
            if seen.started:
                args = ["LOCK.OBSERVE", key, seen.known, int(every * 1000)]
            try:
                reply = await s.call(args, every + max(self.node_timeout, 1.0))
            except asyncio.TimeoutError:
                continue  # cut: asked again, nothing reported
            except Exception as e:  # noqa: BLE001
                failure = core.classify(e, s.cluster)
                if failure.permanent:
                    if core.error_text(e).startswith("lock is shared"):
                        raise core.shared_election(key, s.name) from e
                    raise core.server_error(key, s.name, e) from e
                await asyncio.sleep(core.jitter(self.retry_delay))
                continue
            change = seen.see(core.parse_leader(key, s.name, reply))
            if change is not None:
                yield change

    # --- several keys ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lock_all(
        self, keys: Sequence[str], ttl: float = core.DEFAULT_TTL, wait: float | None = None
    ) -> AsyncIterator[GroupHold]:
        """Holds every key of ``keys`` exclusively for the ``async with`` block, all or none, under
        one owner: ``LOCK.MACQUIRE`` takes free keys in one step with one token; when some
        are taken and ``wait`` allows, the keys are waited for one by one in one global order
        (their UTF-8 bytes, as every relock client orders them), so two groups that overlap
        never deadlock, and what was taken is given back on failure. Renewed together every
        ttl/3, released together on exit; raises ``NotAcquired`` when not granted in time.
        In a Redis Cluster the keys must share a hash slot (a ``{hash tag}``)."""
        hold = await self._acquire_all(keys, ttl, wait, raise_busy=True)
        assert hold is not None
        try:
            yield hold
        finally:
            await hold._close()

    async def acquire_all(
        self, keys: Sequence[str], ttl: float = core.DEFAULT_TTL, wait: float | None = None
    ) -> GroupHold | None:
        """Like ``lock_all()`` without the ``async with``: the ``GroupHold``, or None when the keys
        were not all granted within ``wait``."""
        return await self._acquire_all(keys, ttl, wait, raise_busy=False)

    def _check_slot(self, keys: list[str]) -> None:
        if not self._servers[0].cluster or len(keys) < 2:
            return
        from redis.crc import key_slot

        slots = {key_slot(k.encode("utf-8")) for k in keys}
        if len(slots) > 1:
            raise InvalidArgument(
                f"the keys of a group must share a hash slot in a Redis Cluster ({len(slots)} slots): "
                "give them one {hash tag}"
            )

    async def _acquire_all(self, keys: Sequence[str], ttl: float, wait: float | None, raise_busy: bool) -> GroupHold | None:
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
            release = ["LOCK.MRELEASE", n, *group, owner, "FROM", 1]
            try:
                rnd = await self._round(["LOCK.MACQUIRE", n, *group, owner, ttl_ms], accept=tokens_of)
            except BaseException:
                # Cancelled or interrupted while it was under way: given back in the background.
                self._release_late(group[0], owner, None, release)
                raise
            until = rnd.valid_until(ttl_s)
            if until is not None:
                return GroupHold(self, group, owner, ttl_s, next(iter(rnd.agreed.values())), until)
            now_, later = rnd.give_back()
            if any(now_):
                await self._round(release, targets=now_, until_all=True)
            if any(later):
                self._release_late(group[0], owner, later, release)
            if rnd.permanently_failed():
                raise rnd.permanent_error(group[0])
            not_acked = rnd.acks_error(",".join(group))
            if not_acked is not None:
                raise not_acked
            passed = deadline is not None and time.monotonic() >= deadline
            if passed:
                if raise_busy:
                    raise rnd.acquire_error(",".join(group), ttl_s, limit_wait)
                return None
            if len(self._servers) == 1 and not rnd.some_failed():
                # Some key is taken or has a queue: wait for the keys one by one, in order.
                got = await self._wait_each(group, owner, ttl_ms, deadline)
                if isinstance(got, GroupHold):
                    return got
                if got == "timeout":
                    if raise_busy:
                        raise NotAcquired(f"locks {group!r}: not all acquired within {limit_wait:g} s", key=group[0])
                    return None
                continue  # a key taken early was lost, or a wait failed: start again (a new owner)
            # Redlock, a server in its restart grace, or one that did not answer: try again.
            pause = core.jitter(self.retry_delay)
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(pause)

    async def _wait_each(self, group: list[str], owner: str, ttl_ms: int, deadline: float | None) -> GroupHold | str:
        """Waits for ``group``'s keys one by one in wait order under ``owner``, keeping the
        keys already taken alive (a wait is cut into ttl/3 pieces with a renewal between).
        The group, ``"timeout"`` or ``"again"`` (a key taken early was lost, or a wait failed:
        start over under a new owner); what was taken is given back unless the group is
        returned. ``owner`` asks for nothing again once a give-back of its runs in the
        background, which could end the new grant after the group was returned."""
        ttl_s = ttl_ms / 1000
        taken: list[str] = []
        tokens: dict[str, int] = {}

        async def give_back() -> None:
            if taken:
                release = ["LOCK.MRELEASE", len(taken), *taken, owner, "FROM", 1]
                await self._round(release, until_all=True)
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
                    not_acked = rnd.acks_error(key)
                    if not_acked is not None:
                        # Granted, not acknowledged, taken back: raised at once, as the
                        # group's first try does.
                        await give_back()
                        raise not_acked
                    if rnd.some_failed():
                        # The wait may be granted still (its reply lost, or not come in
                        # time): given back in the background, now and once more a little
                        # later, under this owner, which therefore asks for nothing again
                        # (that later give-back would end the new grant): what was taken
                        # is given back too, and the group starts over under a new owner.
                        self._release_late(key, owner, None, ["LOCK.RELEASE", key, owner, "FROM", 1], ttl=ttl_s)
                        await give_back()
                        await asyncio.sleep(min(core.jitter(self.retry_delay), remaining if remaining is not None else 1e9))
                        return "again"
                    if taken:
                        renewal = await self._round(["LOCK.MRENEW", len(taken), *taken, owner, ttl_ms], accept=all_of(len(taken)))
                        if renewal.renew_verdict() == "lost":
                            await give_back()
                            return "again"
            # The first keys' ttl ran while later ones were waited for: measure the validity.
            renewal = await self._round(["LOCK.MRENEW", len(group), *group, owner, ttl_ms], accept=all_of(len(group)))
            until = renewal.valid_until(ttl_s)
            if until is None:
                await give_back()
                return "again"
            return GroupHold(self, group, owner, ttl_s, {k: tokens[k] for k in group}, until)
        except BaseException:
            # Cancelled, interrupted or failed: whatever was taken, or lands, is given back in
            # the background.
            self._release_late(group[0], owner, None, ["LOCK.MRELEASE", len(group), *group, owner, "FROM", 1])
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
        # The servers said it is gone and the journals are being asked why
        # (_lose_with_history): check() raises from then on.
        self._known: str | None = None
        self._last_failure: str | None = None
        self._renewing = False
        # One renewal at a time (the background one or renew()): the client applies them in
        # the order the server did, so a late reply never extends the validity.
        self._renew_lock = asyncio.Lock()
        # The hold count the server has (1 + the reenter() sections open), and one step of it
        # at a time: each is sent with FROM <count>, so a step sent twice is applied once.
        self._count = 1
        self._step = asyncio.Lock()
        self._wake = asyncio.Event()
        self.lost: asyncio.Event = _LossEvent(self)
        self._task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(self._renew_loop())
        client._holds.add(self)

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
        """Whether the hold is still ours for sure: not lost, not released, within validity."""
        return not self._released and not self.lost.is_set()

    def _stall_reason(self) -> str:
        return (
            f"its validity ran out before it could be renewed ({_NOT_RENEWED} the {self.ttl:g} s ttl?)"
        )

    def _expiry_reason(self, renewing: bool = False) -> str:
        """Why the validity ran out: renewals that failed (what failed, even when another
        was under way at the end), or one that went unanswered (``renewing``: under way when
        it ended), not a process or an event loop that did not run the renewal in time."""
        if self._last_failure:
            return f"its validity ran out: renewals failed ({self._last_failure})"
        if renewing or self._renewing:
            return "its validity ran out during a renewal that no quorum answered"
        return self._stall_reason()

    @property
    def cause(self) -> str | None:
        """The server's word for the loss (``loss.cause``): ``expired``, ``forcereleased``,
        ``deleted``, ``flushed``, ...; None while held, or when nobody can say."""
        return None if self.loss is None else self.loss.cause

    @property
    def who(self) -> Who | None:
        """The client that ended the hold (``loss.who``), where the server could tell."""
        return None if self.loss is None else self.loss.who

    @property
    def keys(self) -> list[str]:
        """The keys held: ``[key]``, or a group's keys in the order given."""
        return [self.key]

    def _renew_args(self, ttl_ms: int) -> list[Any]:
        return ["LOCK.RENEW", self.key, self.owner, ttl_ms]

    def _release_args(self) -> list[Any]:
        return ["LOCK.RELEASE", self.key, self.owner, "FROM", self._count]

    def _all_held(self, reply: Any) -> Any:
        """A renewal's or release's reply as agreed (the reply) or refused (None)."""
        return reply

    def _refused_words(self, servers: list[str]) -> str:
        return f"LOCK.RENEW answered nil on {', '.join(servers)}: the lock expired or was taken away"

    def _lose(self, reason: str, loss: LossReason | None = None) -> None:
        if self._released or asyncio.Event.is_set(self.lost):
            return
        self.reason = reason
        self.loss = loss
        asyncio.Event.set(self.lost)
        self._client._release_late(self.key, self.owner, None, self._release_args(), ttl=self.ttl)

    def check(self) -> None:
        """Raises ``LockLost`` (with the reason) if the hold is lost, released, or past its
        validity; returns otherwise."""
        if self._pid != os.getpid():
            raise core.lost_error(self.key, f"the process forked: this hold belongs to process {self._pid}", None)
        if self.lost.is_set():
            if self.reason is None and time.monotonic() >= self._lost_at():
                self._lose(self._expiry_reason())
            raise core.lost_error(self.key, self.reason or "its validity ran out", self.loss, self._client.servers)
        if self._released:
            raise core.lost_error(self.key, "it was released", None)
        if self._known is not None:
            raise core.lost_error(self.key, self._known, None, self._client.servers)

    async def _renew_loop(self) -> None:
        try:
            await self._renew_forever()
        except asyncio.CancelledError:
            # The event loop is shutting down (asyncio.run() cancels what is left) or the task
            # was cancelled: the hold ends here, its holders signalled first, and is released.
            if not self._released and self._pid == os.getpid():
                with contextlib.suppress(BaseException):
                    await self._end("its renewal task was cancelled (the event loop is ending)")
            raise

    async def _renew_forever(self) -> None:
        every = max(self.ttl / 3, 0.001)
        next_at = time.monotonic() + every
        while not self._released:
            now = time.monotonic()
            if now >= self._lost_at():
                self._lose(self._expiry_reason())
                return
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, min(next_at, self._lost_at()) - now))
                return  # released
            except asyncio.TimeoutError:
                pass
            if self._released or self._pid != os.getpid():
                return
            if time.monotonic() >= self._lost_at():
                self._lose(self._expiry_reason())
                return
            try:
                outcome = await asyncio.wait_for(
                    self._renew_round(self.ttl), max(0.001, self._lost_at() - time.monotonic())
                )
            except asyncio.TimeoutError:
                self._lose(self._expiry_reason(renewing=True))
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
        async with self._renew_lock:
            return await self._renew_locked(ttl_ms, ttl_s, explicit)

    async def _renew_locked(self, ttl_ms: int, ttl_s: float, explicit: bool) -> bool:
        self.check()
        if time.monotonic() >= self.valid_until:
            self._lose(self._stall_reason())
            self.check()
        self._renewing = True
        try:
            rnd = await self._client._round(self._renew_args(ttl_ms), accept=self._all_held)
        finally:
            self._renewing = False
        until = rnd.valid_until(ttl_s)
        if until is not None:
            if not self._released:
                # Lost while the round ran (its validity ran out and it is being given back):
                # the servers' renewal, applied before that give-back, does not revive it.
                self.check()
                self.ttl = ttl_s
                self.valid_until = until
                self._last_failure = None
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
        # check() raises from here while the journals are asked why (up to a node timeout
        # per server, a stopped one first in line); `lost` is set with the reason.
        self._known = self._known or what
        loss = await self._client._history(self.keys, self.owner, self._since)
        where = f"key {loss.entry.key!r} " if loss.entry is not None and len(self.keys) > 1 and loss.entry.key else ""
        self._lose(f"{what}: {where}{loss.message}", loss)

    async def fenced(self, command: str, *args: Any) -> Any:
        """``command args...`` run by the server only while this hold's token is the live
        one (``LOCK.FENCED key token command args...``, atomically with that check); returns
        the command's reply. A stale token raises ``StaleToken`` (never retried: nothing
        ran); one master or a cluster only (``InvalidArgument`` on a Redlock hold: each
        master has its own tokens). Every key of the command must share the lock's hash slot
        in a cluster (a ``{hash tag}``). Sent at most once: a reply lost (no reply in time,
        or the connection ended first) raises ``ServerError`` saying it may have run, and the
        write is never sent again, not even to a cluster's new master; only a refusal that
        says it did not run (``MOVED``, ``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``READONLY``,
        ``MASTERDOWN``) sends it on."""
        key, token = self._fence()
        c = self._client
        core.check_fenced(key, len(c._servers))
        s = c._servers[0]
        try:
            return await s.fenced(key, ["LOCK.FENCED", key, token, command, *args], max(c.node_timeout, 1.0))
        except core.Unanswered as e:
            raise core.fenced_unanswered(key, s.name, e) from e
        except Exception as e:  # noqa: BLE001
            raise core.fenced_error(key, s.name, e) from e

    def _fence(self) -> tuple[str, int]:
        """The key and token LOCK.FENCED checks."""
        return self.key, self.token

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
        """Stops the renewal and releases the hold on every server. Returns True when a
        quorum released it, False when it was no longer held (lost, or released before) or
        servers did not answer (released there again in the background). Raises
        ``ServerError`` (not retryable) when servers refused the release with errors
        retrying cannot fix (``NOPERM``...) and those alone leave no quorum: the lock stays
        held there until its ttl runs out (a minority of them, with other servers that did
        not answer, is False: those are asked again in the background). In a forked child
        it does nothing and returns False: the hold is the parent's."""
        return await self._end(None)

    async def _end(self, reason: str | None) -> bool:
        """Ends the hold: ``reason`` (an end the holder did not ask for: aclose(), the loop
        ending) is signalled first (``lost`` set), then the hold is released; whatever server
        does not answer is asked again in the background until it does or the lease ends."""
        if self._pid != os.getpid() or self._released:
            return False
        if reason is not None and not asyncio.Event.is_set(self.lost):
            self.reason = reason
            with contextlib.suppress(RuntimeError):  # waiters of an event loop already closed
                asyncio.Event.set(self.lost)
        self._released = True
        with contextlib.suppress(RuntimeError):
            self._wake.set()
        self._client._holds.discard(self)
        # The release runs in a task of its own: a cancel (while it waits for another task's
        # step, or for its reply) cuts only this wait, and the whole release goes on in the
        # order of steps.
        rnd = await asyncio.shield(self._client._spawn(self._release_whole()))
        if rnd.won():
            return True
        error = rnd.release_error(self.key)
        if error is not None:
            raise error
        return False

    async def _release_whole(self) -> Round[Any]:
        """The release round(s) under the step: the hold ends whole, a nested section still
        running (another task's) has its count taken down too, one FROM step at a time, and
        its exit then changes nothing (the hold is released)."""
        release = self._release_args()
        try:
            async with self._step:
                tries = 0
                while True:
                    release = self._release_args()
                    rnd = await self._client._round(release, until_all=len(self._client.servers) > 1, accept=self._all_held)
                    n = rnd.hold_count() if len(self._client.servers) == 1 else None
                    if n is not None and n != self._count and tries < 3:
                        # A step this client no longer counted (one interrupted, its
                        # take-back under way): the hold ends whole all the same, from the
                        # count the server has.
                        self._count, tries = n, tries + 1
                        if n >= 1:
                            continue
                    if self._count <= 1 or not rnd.won():
                        break
                    self._count -= 1
        except BaseException:
            # Cancelled itself (the event loop ending): given back in the background.
            self._client._release_late(self.key, self.owner, None, self._release_args(), ttl=self.ttl)
            raise
        unanswered = rnd.unanswered()
        if any(unanswered):
            self._client._release_late(self.key, self.owner, unanswered, release, ttl=self.ttl)
        return rnd

    async def _close(self) -> None:
        try:
            await asyncio.shield(self.release())
        except RelockError:
            pass

    @contextlib.asynccontextmanager
    async def reenter(self) -> AsyncIterator[int]:
        """A nested section under the same owner (LOCK.REENTER); yields the count. As
        ``relock.Hold.reenter``: every step is sent with the count it expects (FROM), a
        LOCK.REENTER that got no reply in time (or was cancelled) is taken back, and the
        section is not entered then (``NotAcquired``, retryable; ``NotAcknowledged`` for one
        its replicas did not acknowledge, with ``replica_acks``)."""
        self.check()
        ttl_ms = core.check_ttl(self.ttl)
        c = self._client
        # The step in runs in a task of its own, as the step out: a cancel cuts only this
        # wait, never the step (which keeps its place in the order of steps), and a step in
        # that went through after all is stepped out again, in order.
        gone = asyncio.Event()  # the caller was cancelled: an entry not yet sent is never sent
        task = c._spawn(self._step_in(ttl_ms, gone))
        try:
            rnd, agreed = await asyncio.shield(task)
        except asyncio.CancelledError:
            gone.set()

            def stepped_in(t: asyncio.Task[tuple[Round[Any], list[bool]]]) -> None:
                if not t.cancelled() and t.exception() is None:
                    with contextlib.suppress(RuntimeError):
                        c._spawn(self._step_out(t.result()[1]))

            task.add_done_callback(stepped_in)
            raise
        try:
            yield int(max(rnd.agreed.values()))
        finally:
            if self._pid == os.getpid():
                # The step out runs in a task of its own: a cancel that lands while it waits
                # for the step (another task's step under way) or for its reply cuts only
                # this wait, never the step, which keeps its place in the order of steps.
                await asyncio.shield(c._spawn(self._step_out(agreed)))

    async def _step_in(self, ttl_ms: int, gone: asyncio.Event) -> tuple[Round[Any], list[bool]]:
        """A nested section's entry (LOCK.REENTER FROM count): the round and the servers that
        agreed; whatever may have run where it failed is taken back before the step ends.
        ``gone``: its caller was cancelled while it waited for the step or for late steps
        (``_settle_steps``): it is not sent then. Sent later, it entered a section nobody
        runs, and a section queued meanwhile was told its count (attack of 2026-12-05)."""
        c = self._client
        async with self._step:
            await self._settle_steps()
            if gone.is_set():
                raise asyncio.CancelledError("the section's caller was cancelled before its entry was sent")
            n = self._count
            undo = ["LOCK.RELEASE", self.key, self.owner, "FROM", n + 1]
            try:
                rnd = await c._round(
                    ["LOCK.REENTER", self.key, self.owner, ttl_ms, *self._mode, "FROM", n], until_all=True, undo=undo
                )
            except BaseException:
                c._release_late(self.key, self.owner, None, undo, ttl=self.ttl)
                raise
            if not rnd.won():
                # Taken back wherever it may have run: the servers that granted it, and those
                # whose reply was lost (a reset connection); a server where it never ran
                # answers the take-back as a repeat and changes nothing. Under the step, so
                # that no later step meets the count between.
                await self._take_back(undo, [g or u for g, u in zip(rnd.agreed_by(), rnd.unanswered())])
                if rnd.permanently_failed():
                    raise rnd.permanent_error(self.key)
                not_acked = rnd.acks_error(self.key, "re-entered")
                if not_acked is not None:
                    raise not_acked  # its level taken back: the outer hold keeps its count
                if rnd.renew_verdict() == "lost":
                    raise LockLost(f"lock {self.key!r}: re-entry refused ({rnd.describe()})", key=self.key, reason="re-entry refused")
                raise NotAcquired(f"lock {self.key!r}: re-entry not answered ({rnd.describe()}); the section was not entered", key=self.key)
            # Won on a quorum: a server whose reply was lost may have run it all the same, and
            # is taken back (a repeat where it never ran), so that it keeps the outer count.
            await self._take_back(undo, [u and not g for g, u in zip(rnd.agreed_by(), rnd.unanswered())])
            self._count = n + 1
            return rnd, rnd.agreed_by()

    async def _settle_steps(self) -> None:
        """Under the step, before a section's entry: waits while a step of this hold's count
        is being given back in the background (a section's exit or a re-entry whose reply was
        lost). Such a give-back is sent once more 100 ms after it was answered, FROM the count
        it moved from; an entry asks FROM that same count, and would have its count taken
        back by it (a nested section then refused). Bounded: a give-back ends within the ttl,
        and a hold lost meanwhile raises (``check``)."""
        while (self.key, self.owner) in self._client._late_steps:
            self.check()
            await asyncio.sleep(0.01)
        self.check()

    async def _take_back(self, undo: list[Any], targets: list[bool]) -> None:
        """Under the step: ``undo`` (LOCK.RELEASE FROM count + 1) on ``targets``, and in the
        background where it got no answer."""
        if not any(targets):
            return
        c = self._client
        try:
            done = await c._round(undo, targets=targets, until_all=True)
        except BaseException:
            c._release_late(self.key, self.owner, targets, undo, ttl=self.ttl)
            raise
        left = [t and u for t, u in zip(targets, done.unanswered())]
        if any(left):
            c._release_late(self.key, self.owner, left, undo, ttl=self.ttl)

    async def _step_out(self, agreed: list[bool]) -> None:
        """A nested section's exit: its count taken down by one (LOCK.RELEASE FROM count),
        given back in the background where no reply came."""
        c = self._client
        release: list[Any] = ["LOCK.RELEASE", self.key, self.owner, "FROM", 0]
        try:
            async with self._step:
                if self._released:
                    return  # the hold was ended whole, this section's count with it
                m = self._count
                release = ["LOCK.RELEASE", self.key, self.owner, "FROM", m]
                self._count = m - 1
                done = await c._round(release, targets=agreed, until_all=True)
        except BaseException:
            if release[-1]:
                c._release_late(self.key, self.owner, agreed, release, ttl=self.ttl)
            raise
        unanswered = done.unanswered()
        if any(unanswered):
            c._release_late(self.key, self.owner, unanswered, release, ttl=self.ttl)


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
        return ["LOCK.MRELEASE", len(self._keys), *self._keys, self.owner, "FROM", 1]

    def _all_held(self, reply: Any) -> Any:
        return reply if reply is not None and int(reply) == len(self._keys) else None

    def _refused_words(self, servers: list[str]) -> str:
        return f"LOCK.MRENEW found part of the group no longer held on {', '.join(servers)}"

    def _fence(self) -> tuple[str, int]:
        return self._keys[0], self.key_tokens[self._keys[0]]

    async def downgrade(self) -> None:
        raise InvalidArgument("a group of keys is held exclusively: downgrade is for one key")

    @contextlib.asynccontextmanager
    async def reenter(self) -> AsyncIterator[int]:
        raise InvalidArgument("a group of keys is not reentrant: hold the group once")
        yield 0  # pragma: no cover


class Leadership(Hold):
    """A leadership won by ``Relock.campaign()``: the hold of the election's key. ``term`` is
    its fencing token (hand it to whatever the leader writes, or use ``fenced()``), ``value``
    the proclaimed value; ``lost`` is set (with ``reason``) when leadership is lost, and
    ``await resign()`` hands it to the next candidate in the same step."""

    def __repr__(self) -> str:
        return f"Leadership(key={self.key!r}, value={self.value!r}, term={self.token})"

    async def __aenter__(self) -> Leadership:
        return self

    @property
    def term(self) -> int:
        """The term: the hold's fencing token, larger than every earlier term of the key."""
        return self.token

    @property
    def value(self) -> str:
        """The proclaimed value: the owner without its last ``/``-part."""
        return core.proclaimed(self.owner)

    async def resign(self) -> bool:
        """Ends the leadership (LOCK.RELEASE): the next candidate leads in the same step.
        As ``release()``: True when released, False when it was no longer held."""
        return await self.release()

    async def downgrade(self) -> None:
        raise InvalidArgument("a leadership is an exclusive hold: it is never downgraded")
