"""The client for redis-py's synchronous clients: ``relock.Relock`` and its ``Hold``."""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import contextlib
import copy
import os
import queue
import threading
import time
import weakref
from typing import Any, Literal, Callable, Iterator, Sequence, TypeVar

import redis
import redis.cluster
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import _core as core
from ._core import Failure, Holder, KeyStats, Leader, LeaderChange, LockInfo, LogEntry, LossReason, Round, Waiter, Who
from .errors import InvalidArgument, LockLost, NotAcknowledged, NotAcquired, RelockError, ServerError, StaleToken

T = TypeVar("T")

#: Why a hold's validity ran out unrenewed, when no renewal failed (``Hold._stall_reason``).
_NOT_RENEWED = "the process did not run its renewal in time: a stall longer than"

#: How long a connection may take to open (TCP and the handshake) in the background, at
#: least: the calls waiting for it give up at their own deadlines, the next ones get it.
CONNECT_TIMEOUT = 2.0

#: How often the server is asked whether a blocked LOCK.WAIT's connection is still there.
WATCH_EVERY = 1.0

#: Extra time a blocked LOCK.WAIT's reply may take beyond its own timeout before the
#: connection is given up (a busy server answers late; a stopped one never does).
WAIT_GRACE = 1.0


class _Workers:
    """Worker threads for the client's requests, in place of ``concurrent.futures``'s
    executor, whose threads the interpreter joins (and whose ``submit`` it refuses) once the
    main thread returns: renewals must go on while any thread of the program holds a lock, a
    release at exit must still run, and a ``LOCK.WAIT`` blocked in a worker must not keep a
    dying process alive. These threads are daemons, started on demand up to ``limit`` (None:
    no limit) and ended after ``linger`` idle seconds."""

    def __init__(self, name: str, limit: int | None, linger: float = 30.0) -> None:
        self._name = name
        self._limit = limit
        self._linger = linger
        self._queue: queue.SimpleQueue[tuple[cf.Future[Any], Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one per idle worker, taken by a submit that uses it
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, fn: Callable[..., T], *args: Any) -> cf.Future[T]:
        future: cf.Future[T] = cf.Future()
        self._queue.put((future, fn, args))
        if self._idle.acquire(blocking=False):
            return future  # an idle worker takes it
        with self._lock:
            start = self._limit is None or self._threads < self._limit
            if start:
                self._threads += 1
        if start:
            try:
                threading.Thread(target=self._work, name=self._name, daemon=True).start()
            except RuntimeError:  # no new thread (the interpreter is finalizing): run it here
                with self._lock:
                    self._threads -= 1
                while not future.done():
                    try:
                        self._run(self._queue.get_nowait())
                    except queue.Empty:
                        break
        return future

    @staticmethod
    def _run(item: tuple[cf.Future[Any], Callable[..., Any], tuple[Any, ...]]) -> None:
        future, fn, args = item
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(e)
        else:
            future.set_result(result)

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self._linger)
            except queue.Empty:
                # Idle long enough: leave, unless a submit counted on this worker meanwhile.
                if self._idle.acquire(blocking=False):
                    with self._lock:
                        self._threads -= 1
                    return
                continue
            self._run(item)
            del item
            self._idle.release()


class _Cancel:
    """Lets another thread cut a blocking call short: closes its connection, or keeps it from
    sending at all when the call is still connecting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._conn: Any = None

    def attach(self, conn: Any) -> bool:
        """Whether ``conn`` may go on (False once cancelled)."""
        with self._lock:
            self._conn = conn
            return not self._cancelled

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()


class _Server:
    """One master: a redis-py client (one server, or a Redis Cluster acting as one).

    For one server, relock keeps connections of its own, made like the client's pool makes
    them (same class and options: host, password, TLS, protocol, ...), so that it decides their
    timeouts. A call waits for a connection no longer than its own deadline: connections are
    opened (TCP, then the handshake: HELLO, AUTH, SELECT, ...) by background threads, a few at
    a time, each bounded by ``connect_timeout``, without redis-py's retries. A stopped server
    that still accepts connections (its kernel does) so costs a call its deadline and no
    thread of the caller's, whatever ``socket_timeout`` the client has (none by default); a
    server that is slow to connect to (far away, or a machine under load) still gets a
    connection for the next call, and a refused connection fails the waiting calls at once.
    With ``first_grace`` (a client of one server, whose answer is the only one), calls made
    before a first connection to it ever opened wait up to ``connect_timeout`` for one (a
    process starting up does not know yet how far its server is), and then have their own
    timeout for the command; over several masters a round never waits for one longer than
    its deadline. A cluster client keeps its own timeouts; a fenced write alone is sent by
    relock itself on one of its connections, once (see ``fenced``)."""

    #: Idle connections kept for the next calls; a burst opens more and closes the rest.
    KEEP_IDLE = 16
    #: Connections being opened at once, at most.
    MAX_CONNECTING = 4

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 27200e65440b:
    # connections are opened by background threads under a threading.Condition, with a
    # first-connection grace; asyncio opens them in the calling task
    def __init__(self, client: Any, connect_timeout: float, first_grace: bool, node_timeout: float = 0.1) -> None:
        self.client = client
        self._node_timeout = node_timeout
        self.cluster = isinstance(client, redis.cluster.RedisCluster)
        if self.cluster:
            nodes = [f"{n.host}:{n.port}" for n in client.get_nodes()[:3]]
            self.name = f"cluster[{','.join(nodes)}]"
            #: The driver's socket timeout (the cluster's connections are its own).
            self.socket_timeout: Any = client.nodes_manager.connection_kwargs.get("socket_timeout")
            return
        pool = client.connection_pool
        kw = pool.connection_kwargs
        self.socket_timeout = kw.get("socket_timeout")
        self.name = core.server_name(kw.get("host", "localhost"), kw.get("port", 6379), kw.get("path"))
        self._connection_class = pool.connection_class
        # No retries inside a connection attempt: calls have deadlines and try again on their own.
        self._kwargs = {
            **kw,
            "retry": Retry(NoBackoff(), 0),
            "retry_on_timeout": False,
            "health_check_interval": 0,
            "socket_timeout": connect_timeout,
            "socket_connect_timeout": connect_timeout,
        }
        self._connect_timeout = connect_timeout
        self._first_grace = first_grace
        self._connected_once = False
        self._cond = threading.Condition()
        self._idle: list[Any] = []
        self._connecting = 0
        self._waiting = 0
        self._attempts = 0  # connection attempts finished, so far
        self._failures: list[tuple[int, BaseException]] = []  # the last few, by attempt
        self._pid = os.getpid()

    def _after_fork(self) -> None:
        """In a forked child (``os.register_at_fork``): a lock that a thread of the parent
        held at the fork would stay held for ever here, and the parent's connections are its
        sockets; all is made anew (the parent's connections are dropped, never used)."""
        if self.cluster:
            return
        self._cond = threading.Condition()
        self._idle, self._connecting, self._waiting, self._failures = [], 0, 0, []
        self._pid = os.getpid()

    def _forked(self) -> None:
        """In a forked child, under the lock: the parent's sockets and threads are not ours."""
        if self._pid != os.getpid():
            self._idle, self._connecting, self._waiting, self._pid = [], 0, 0, os.getpid()

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 26ea9d4e1e8e:
    # waits on a threading.Condition, up to the caller's deadline, for a connection a background
    # thread opens
    def _checkout(self, connect_by: float | None) -> Any:
        """An idle connection, waiting for one until ``connect_by`` (a monotonic instant;
        None: no bound)."""
        with self._cond:
            self._forked()
            since = self._attempts
            while True:
                while self._idle:
                    conn = self._idle.pop()
                    # An idle connection with something to read was closed by the server (a
                    # restart, CLIENT KILL, an idle timeout): not worth a failed call.
                    with contextlib.suppress(Exception):
                        if not conn.can_read():
                            return conn
                    conn.disconnect()
                failed = [e for n, e in self._failures if n > since]
                if failed:  # an attempt made while this call waited failed: say why at once
                    raise copy.copy(failed[-1])
                if self._connecting <= self._waiting and self._connecting < self.MAX_CONNECTING:
                    self._connecting += 1
                    threading.Thread(target=self._open, name=f"relock connect {self.name}", daemon=True).start()
                left = None if connect_by is None else connect_by - time.monotonic()
                if left is not None and left <= 0:
                    raise rex.TimeoutError(f"Timeout connecting to {self.name}")
                self._waiting += 1
                try:
                    self._cond.wait(left)
                finally:
                    self._waiting -= 1

    def _open(self) -> None:
        """A background thread: opens one connection and hands it to the idle list."""
        conn = self._connection_class(**self._kwargs)
        failure: BaseException | None = None
        try:
            conn.connect()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting calls
            failure = e
            with contextlib.suppress(Exception):
                conn.disconnect()
        with self._cond:
            if self._pid != os.getpid():
                return
            self._connecting -= 1
            self._attempts += 1
            if failure is None:
                self._idle.append(conn)
                self._connected_once = True
            else:
                self._failures = [*self._failures[-3:], (self._attempts, failure)]
            self._cond.notify_all()

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin c46c5089712c:
    # hands the connection to a waiting thread (Condition.notify); asyncio closes a surplus one in a
    # task
    def _checkin(self, conn: Any) -> None:
        with self._cond:
            if self._pid == os.getpid() and len(self._idle) < self.KEEP_IDLE:
                self._idle.append(conn)
                self._cond.notify()
                return
        conn.disconnect()

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 0f02b769cd79:
    # a blocking call a _Cancel cuts from another thread, connecting bounded apart (connect_within),
    # the wait watched inline; asyncio: wait_for and a watcher task
    def call(
        self,
        args: Sequence[Any],
        timeout: float | None,
        cancel: _Cancel | None = None,
        connect_within: float | None = None,
        undo: Sequence[Any] | None = None,
        acks: tuple[int, float] | None = None,
    ) -> Any:
        """Runs one command. ``timeout`` (None: no bound) bounds all of it, connecting
        included; ``connect_within`` bounds connecting alone (a blocking wait connects within
        the node timeout, then may wait long). ``cancel`` lets another thread cut it short.
        ``undo``: the command that takes it back when no reply comes in time, sent on the same
        connection (so the server runs it after the command, if it runs the command at all).
        ``acks``: (replicas, timeout): a reply that is not nil is followed by ``WAIT`` on the
        same connection (see ``_acked``)."""
        if self.cluster:
            if acks is not None:
                return self._cluster_acked(args, timeout, acks)
            return self.client.execute_command(*args)
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        bounds = [d for d in (deadline, None if connect_within is None else now + connect_within) if d is not None]
        first = self._first_grace and not self._connected_once
        if first and bounds:
            conn = self._checkout(max(min(bounds), now + self._connect_timeout))
            deadline = None if timeout is None else time.monotonic() + timeout
        else:
            conn = self._checkout(min(bounds) if bounds else None)
        if cancel is not None and not cancel.attach(conn):
            self._checkin(conn)
            raise rex.ConnectionError(f"{self.name}: cancelled")
        watch = str(args[0]).upper() == "LOCK.WAIT" and (timeout is None or timeout > 2 * WATCH_EVERY)
        try:
            if watch:
                reply = self._watched(conn, args, deadline)
            else:
                conn.send_command(*args, check_health=False)
                left = None if deadline is None else max(0.001, deadline - time.monotonic())
                try:
                    reply = conn.read_response(timeout=left, disconnect_on_error=undo is None)
                except rex.TimeoutError:
                    if undo is not None:
                        self._undo(conn, undo)
                    raise
        except rex.ResponseError:
            # An error reply: the connection is fine, unless another thread cut the call short.
            if cancel is not None and not cancel.attach(None):
                conn.disconnect()
            else:
                self._checkin(conn)
            raise
        except rex.TimeoutError as e:
            if "taken back" not in str(e):
                conn.disconnect()
            raise
        except BaseException:
            conn.disconnect()
            raise
        if cancel is not None and not cancel.attach(None):
            conn.disconnect()  # cut short while the reply came: its socket may be closed
        elif acks is not None and reply is not None:
            return self._acked(conn, reply, acks)
        else:
            self._checkin(conn)
        return reply

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin da0667019a81:
    # reads WAIT's reply with the socket's own timeout; asyncio bounds the read with _within
    def _acked(self, conn: Any, reply: Any, acks: tuple[int, float], pool: Any = None, master: str | None = None) -> Any:
        """After a write the master did (``reply``): ``WAIT replicas timeout_ms`` on its
        connection, so that the count covers that write (and, after a blocking LOCK.WAIT, the
        grant: Redis sets a module-unblocked client's replication offset when it answers it).
        The write is never sent again whatever happens to the WAIT: a WAIT that fails or
        gets no answer counts as no acknowledgement. Returns ``reply`` when enough replicas
        acknowledged; raises ``core.NotAcked`` otherwise. ``pool``: the cluster node's pool the
        connection goes back to (``master`` names that node), instead of relock's own."""

        def give_back(broken: bool) -> None:
            if broken:
                conn.disconnect()
            if pool is not None:
                pool.release(conn)
            elif not broken:
                self._checkin(conn)

        wanted, timeout = acks
        try:
            conn.send_command(*core.wait_args(acks), check_health=False)
            acked = int(conn.read_response(timeout=timeout + max(self._node_timeout, 0.1)))
        except rex.ResponseError as e:
            give_back(False)
            raise core.NotAcked(reply, 0, wanted, f"WAIT refused: {core.error_text(e)}", master) from e
        except Exception as e:  # noqa: BLE001 - the write stands; only its acknowledgement is unknown
            give_back(True)
            raise core.NotAcked(reply, 0, wanted, f"WAIT got no answer: {core.error_text(e) or type(e).__name__}", master) from e
        except BaseException:
            give_back(True)
            raise
        give_back(False)
        if acked < wanted:
            raise core.NotAcked(reply, acked, wanted, master=master)
        return reply

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin a105fe538705:
    # blocking reads bounded by socket timeouts, the first-connection grace; asyncio: wait_for
    def fenced(self, key: str, args: Sequence[Any], timeout: float) -> Any:
        """``args`` (a ``LOCK.FENCED``, or a ``LOCK.FORCERELEASE``: a command of ``key`` not
        safe to run twice) sent at most once, within ``timeout``: once it may have left, no
        reply in time or a connection that ended first raises ``core.Unanswered`` and it is
        never sent again (redis-py's cluster client would send it again after a connection
        error or its socket timeout, and the write would apply twice). A cluster follows a
        refusal that says the node did not run it (``MOVED``, ``ASK``, ``TRYAGAIN``,
        ``CLUSTERDOWN``, ``READONLY``, ``MASTERDOWN``) to the key's master, and opens a
        connection again when opening one failed (nothing was sent)."""
        now = time.monotonic()
        deadline = now + timeout
        if self.cluster:
            return self._fenced_cluster(key, args, deadline)
        first = self._first_grace and not self._connected_once
        conn = self._checkout(max(deadline, now + self._connect_timeout) if first else deadline)
        if first:
            deadline = time.monotonic() + timeout
        try:
            conn.send_command(*args, check_health=False)
            reply = conn.read_response(timeout=max(0.001, deadline - time.monotonic()))
        except rex.ResponseError:
            self._checkin(conn)
            raise
        except BaseException as e:
            conn.disconnect()
            if (u := core.unanswered(e)) is None:
                raise
            raise u from e
        self._checkin(conn)
        return reply

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin e9ac9a3c19d3:
    # redis-py's sync cluster client; asyncio's is initialized first and its reads bounded by
    # wait_for
    def _cluster_acked(self, args: Sequence[Any], timeout: float | None, acks: tuple[int, float]) -> Any:
        """A write that waits for replica acknowledgements in a cluster: sent by relock on a
        connection of the key's master (following ``MOVED``, ``ASK``... as a fenced write),
        with ``WAIT`` after it on that connection (redis-py's cluster client would send the
        WAIT to a node of its choice). Never sent again once it may have run."""
        deadline = time.monotonic() + (core.MAX_MS / 1000 if timeout is None else timeout)
        try:
            return self._fenced_cluster(core.acked_key(args), args, deadline, acks)
        except core.Unanswered as e:
            raise rex.TimeoutError(f"{self.name}: {args[0]} {e.why}") from e

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 3e246f87fdb3:
    # the sync cluster client keeps its own timeouts; asyncio bounds the call with wait_for
    def role(self, key: str, timeout: float) -> Any:
        """``ROLE`` of ``key``'s master: the server, or the cluster node that serves it."""
        if not self.cluster:
            return self.call(["ROLE"], timeout)
        node = core.node_of(self.client, key)
        return None if node is None else self.client.execute_command("ROLE", target_nodes=node)

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin f537a56267c0:
    # redis-py's sync cluster pools (get_connection, release); asyncio's nodes (acquire_connection,
    # initialize first)
    def _fenced_cluster(self, key: str, args: Sequence[Any], deadline: float, acks: tuple[int, float] | None = None) -> Any:
        client = self.client
        node = core.node_of(client, key)
        asking = False
        for _ in range(core.FENCED_REDIRECTS):
            if deadline - time.monotonic() <= 0:
                break
            if node is None:
                client.nodes_manager.initialize()
                node = core.node_of(client, key)
                if node is None:
                    raise rex.ClusterError(f"no master serves the slot of {key!r}")
            pool = node.redis_connection.connection_pool
            try:
                # Nothing sent yet: a connection that cannot be opened is tried again.
                try:
                    conn = pool.get_connection()
                except TypeError:  # redis-py before 5.3 wants a command name
                    conn = pool.get_connection("LOCK.FENCED")
            except (rex.ConnectionError, rex.TimeoutError, OSError):
                node = None
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
                continue
            try:
                if asking:
                    conn.send_packed_command(conn.pack_commands([["ASKING"], list(args)]), check_health=False)
                    conn.read_response(timeout=max(0.001, deadline - time.monotonic()))
                else:
                    conn.send_command(*args, check_health=False)
                reply = conn.read_response(timeout=max(0.001, deadline - time.monotonic()))
            except core.NOT_RUN as e:
                pool.release(conn)
                if core.not_run_here(e, acks):
                    raise
                asking = isinstance(e, rex.AskError) and not isinstance(e, rex.MovedError)
                if isinstance(e, rex.AskError) and asking:
                    host, port = core.remap(client, e.host, e.port)
                    node = client.get_node(host=host, port=port)
                    if node is None:
                        raise
                elif isinstance(e, rex.TryAgainError):
                    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                else:
                    if not isinstance(e, rex.MovedError):  # CLUSTERDOWN, READONLY, MASTERDOWN
                        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
                    client.nodes_manager.initialize()
                    node = core.node_of(client, key)
                continue
            except rex.ResponseError:
                pool.release(conn)
                raise
            except BaseException as e:
                conn.disconnect()
                pool.release(conn)
                if (u := core.unanswered(e)) is None:
                    raise
                raise u from e
            if acks is not None and reply is not None:
                return self._acked(conn, reply, acks, pool, f"{node.host}:{node.port}")
            pool.release(conn)
            return reply
        raise rex.TimeoutError(f"no master of {key!r} took the command in time (it was refused, not run)")

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin e4df9bff5749:
    # blocking reads bounded by socket timeouts, the connection checked in here; asyncio reads in a
    # shielded task
    def _undo(self, conn: Any, undo: Sequence[Any]) -> None:
        """A command that got no reply in time may still run (a server stalled a moment): its
        ``undo`` goes on the same connection, after it. Both replies are read for a little
        while; the connection is closed when they do not come (both commands are with the
        server by then, in order)."""
        try:
            conn.send_command(*undo, check_health=False)
            end = time.monotonic() + max(self._node_timeout, 0.1)
            for _ in range(2):
                with contextlib.suppress(rex.ResponseError):
                    conn.read_response(timeout=max(0.001, end - time.monotonic()), disconnect_on_error=False)
        except BaseException:
            conn.disconnect()
            raise
        self._checkin(conn)
        # The caller's own error handling must not close the connection again.
        raise rex.TimeoutError(f"no reply in time from {self.name}: the command was taken back ({undo[0]})")

    def _watched(self, conn: Any, args: Sequence[Any], deadline: float | None) -> Any:
        """A blocking wait whose connection is watched (as lockctl's are): every second the
        server is asked over another connection whether it still has it blocked (``CLIENT
        LIST ID``). One the server no longer knows, one it answered without the answer coming
        (seen twice), or three checks in a row unanswered, died silently: it is closed there
        too (``CLIENT KILL``, best effort) and the wait fails as a lost connection (the caller
        waits again). Where an ACL forbids ``CLIENT``, the check is a ``PING``."""
        conn.send_packed_command(conn.pack_commands([["CLIENT", "ID"], list(args)]), check_health=False)
        cid: int | None
        try:
            cid = int(conn.read_response(timeout=max(1.0, self._connect_timeout)))
        except rex.ResponseError:
            cid = None
        answered = unanswered = 0
        while True:
            step = WATCH_EVERY if answered == 0 else self._check_within()
            left = None if deadline is None else deadline - time.monotonic()
            if conn.can_read(timeout=step if left is None else max(0.0, min(step, left))):
                left = None if deadline is None else max(0.001, deadline - time.monotonic())
                return conn.read_response(timeout=left)
            if deadline is not None and time.monotonic() >= deadline:
                raise rex.TimeoutError(f"Timeout reading from {self.name}")
            seen, cid = self._seen(cid)
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
                        self.call(["CLIENT", "KILL", "ID", cid], self._check_within())
                raise rex.ConnectionError(f"{self.name}: the waiting connection died silently ({seen})")

    def _check_within(self) -> float:
        return max(WATCH_EVERY, self._node_timeout)

    def _seen(self, cid: int | None) -> tuple[str, int | None]:
        """What the server says of the waiting connection ``cid``: ``blocked``, ``answered``,
        ``gone`` or ``unknown`` (no answer); and the id to ask next time (None once CLIENT is
        refused)."""
        if cid is None:
            try:
                self.call(["PING"], self._check_within())
                return "blocked", None
            except Exception:  # noqa: BLE001
                return "unknown", None
        try:
            reply = core.text(self.call(["CLIENT", "LIST", "ID", cid], self._check_within())) or ""
        except rex.ResponseError:
            return "blocked", None  # CLIENT forbidden: the server alone is checked from now on
        except Exception:  # noqa: BLE001
            return "unknown", cid
        return core.client_list_state(reply), cid

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 5926fb6f5013:
    # blocking pipelined reads bounded by socket timeouts; asyncio: wait_for over the whole
    def call_many(self, commands: Sequence[Sequence[Any]], timeout: float) -> list[Any]:
        """Several commands in one round trip (pipelined), each reply or the error it raised
        in its place; the whole bounded by ``timeout``."""
        if self.cluster:
            pipe = self.client.pipeline(transaction=False)
            for args in commands:
                pipe.execute_command(*args)
            return list(pipe.execute(raise_on_error=False))
        deadline = time.monotonic() + timeout
        conn = self._checkout(deadline if self._connected_once else max(deadline, time.monotonic() + self._connect_timeout))
        out: list[Any] = []
        try:
            conn.send_packed_command(conn.pack_commands([list(a) for a in commands]), check_health=False)
            for _ in commands:
                try:
                    out.append(conn.read_response(timeout=max(0.001, deadline - time.monotonic())))
                except rex.ResponseError as e:
                    out.append(e)
        except BaseException:
            conn.disconnect()
            raise
        self._checkin(conn)
        return out

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 72f8867260b8:
    # the sync cluster client keeps its own timeouts; asyncio bounds it with wait_for
    def call_nodes(self, args: Sequence[Any], timeout: float) -> list[tuple[str, Any]]:
        """A command without a key on every master: each cluster primary, or the one server."""
        if not self.cluster:
            return [(self.name, self.call(args, timeout))]
        reply = self.client.execute_command(*args, target_nodes=self.client.get_primaries())
        if isinstance(reply, dict):
            return [(str(k), v) for k, v in reply.items()]
        return [(self.name, reply)]

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 855f6528a036:
    # under the Condition, and a cluster's connections are redis-py's own; asyncio closes in the
    # loop
    def close(self) -> None:
        """Closes the idle connections."""
        if self.cluster:
            return
        with self._cond:
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.disconnect()


class _Renewer:
    """One thread per client that renews every live hold at ttl/3 and reports each loss at
    its validity's end at the latest; the renewal rounds run on workers of their own (never
    behind blocking waits or the callers' rounds), so a stopped server never holds up
    another hold's loss signal."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.holds: dict[int, Hold] = {}
        self.wake_at = float("inf")
        self.thread: threading.Thread | None = None

    def add(self, hold: Hold) -> None:
        with self.cond:
            self.holds[id(hold)] = hold
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="relock renewals", daemon=True)
                self.thread.start()
            if hold._next_due() < self.wake_at:
                self.cond.notify()

    def remove(self, hold: Hold) -> None:
        with self.cond:
            self.holds.pop(id(hold), None)

    def poke(self, at: float) -> None:
        with self.cond:
            if at < self.wake_at:
                self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                now = time.monotonic()
                due = [h for h in self.holds.values() if h._next_due() <= now]
                later = [h._next_due() for h in self.holds.values()]
                self.wake_at = min([t for t in later if t > now], default=now + 60.0)
                if not due:
                    self.cond.wait(max(0.0, self.wake_at - now))
                    continue
            for h in due:
                h._on_due(now)


_clients: weakref.WeakSet[Relock] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The child has none of the parent's threads, and any lock one of them held at the fork
    # stays held forever in the child: every lock, queue and pool is made anew. Its holds are
    # the parent's and are never renewed or released here (Hold checks the pid on every use);
    # the parent's connections (shared sockets) are dropped unused.
    for c in list(_clients):
        c._renewer = _Renewer()
        c._make_pools()
        for s in c._servers:
            s._after_fork()


def _release_at_exit() -> None:
    # Threads of the program may still run under these holds (daemon threads run on until the
    # interpreter ends): each hold is signalled before it is released.
    for c in list(_clients):
        for h in list(c._renewer.holds.values()):
            if h._pid == os.getpid():
                with contextlib.suppress(Exception):
                    h._end("the interpreter is exiting")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_release_at_exit)


class Observer:
    """The changes of an election's leader (``Relock.observe``): an iterator of
    ``LeaderChange`` that ``stop()`` ends from any thread. A ``LOCK.OBSERVE`` blocked at that
    moment is cut at once (its connection closed); the iteration then ends (``for`` leaves
    the loop) without reporting anything more. A ``with`` block stops it on exit."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._changes: Iterator[LeaderChange] = iter(())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._cancel: _Cancel | None = None

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Ends the iteration: the thread iterating gets ``StopIteration`` (its ``for`` ends)
        promptly, even while it waits in ``LOCK.OBSERVE``. Safe from any thread, and twice."""
        with self._lock:
            self._stop.set()
            cancel = self._cancel
        if cancel is not None:
            cancel.cancel()

    def _next_call(self) -> _Cancel | None:
        """A fresh cut-off for the next command, None once stopped."""
        with self._lock:
            if self._stop.is_set():
                return None
            self._cancel = _Cancel()
            return self._cancel

    def __iter__(self) -> Observer:
        return self

    def __next__(self) -> LeaderChange:
        return next(self._changes)

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Observer(key={self.key!r}, stopped={self.stopped})"


class Relock:
    """Locks on one Redis server with the relock module, on a Redis Cluster
    (``redis.cluster.RedisCluster``), or with Redlock over a list of independent masters.

    ``client``: a ``redis.Redis``, a ``redis.cluster.RedisCluster``, or a list of
    ``redis.Redis`` (Redlock, quorum N/2+1). Options, each with relock-client's default:

    - ``owner_prefix``: what comes before the random part of every owner; default
      ``<host>/<pid>``, ``""`` for none.
    - ``node_timeout``: how long one server may take to answer one command, 0.1 s (a
      Redis Cluster client keeps its own timeouts).
    - ``retry_delay``: the mean pause between two Redlock rounds of a wait, 0.2 s.
    - ``max_partial_hold``: how long a Redlock wait keeps a minority of grants while it waits
      for a quorum (never more than ttl/4), 0.5 s.
    - ``replica_acks``: how many replicas of a master must acknowledge an acquisition or a
      renewal (``WAIT``, on the write's connection right after it) before it counts; 0 (off).
      A grant not acknowledged is released again on that master and the acquisition (or
      ``campaign``) raises ``NotAcknowledged``, naming the master and how many acknowledged;
      a renewal not acknowledged does not count, except on a master with fewer replicas
      connected than asked, once all of those acknowledged. In a cluster, the key's master's
      replicas.
    - ``replica_ack_timeout``: how long a master waits for them, 0.5 s.

    Every hold has an owner of its own, so threads sharing one ``Relock`` exclude each other.
    """

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin e5f8dcda5081:
    # worker pools and the renewal thread (_make_pools, _Renewer) instead of tasks and a WeakSet of
    # holds
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
        if len(clients) > 1 and any(isinstance(c, redis.cluster.RedisCluster) for c in clients):
            raise InvalidArgument("Redlock takes independent masters; pass a RedisCluster alone")
        if not node_timeout >= 0.001:
            raise InvalidArgument(f"node_timeout {node_timeout!r} is below 1 ms: every request would time out")
        connect_timeout = max(float(node_timeout), CONNECT_TIMEOUT)
        self._servers = [_Server(c, connect_timeout, len(clients) == 1, float(node_timeout)) for c in clients]
        names = [s.name for s in self._servers]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise InvalidArgument(f"{name} is named twice: Redlock needs independent masters")
        self._names = names
        self._prefix: object = core.HOST_PID if owner_prefix is None else owner_prefix
        core.make_owner(self._prefix)
        self.node_timeout = float(node_timeout)
        self.retry_delay = core.check_pause("retry_delay", retry_delay)
        self.max_partial_hold = core.check_pause("max_partial_hold", max_partial_hold)
        self._renewer = _Renewer()
        # (key, owner) -> the steps of that hold's count being given back in the background,
        # under _late_lock (the background workers end them).
        self._late_steps: dict[tuple[str, str], int] = {}
        self._late_lock = threading.Lock()
        self._make_pools()
        _clients.add(self)

    def _make_pools(self) -> None:
        n = len(self._servers)
        # The callers' rounds (acquire, release, queries): each request bounded by the node
        # timeout, so a bounded number of workers serves them.
        self._io = _Workers("relock", max(16, 8 * n))
        # Blocking LOCK.WAITs of Redlock rounds: one worker each for as long as it blocks.
        self._waits = _Workers("relock wait", None)
        # Renewals, releases in the background and their requests: never queued behind the
        # others, so that no number of waiting threads can starve a holder's renewals.
        self._background = _Workers("relock renewal", None)

    # --- what the client is ---------------------------------------------------------------

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def servers(self) -> list[str]:
        """The servers, as ``host:port`` (a cluster: ``cluster[seed,...]``)."""
        return list(self._names)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def quorum(self) -> int:
        return core.quorum(len(self._servers))

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def new_owner(self) -> str:
        """A fresh owner, ``<prefix>/<random>``."""
        return core.make_owner(self._prefix)

    # --- acquiring ------------------------------------------------------------------------

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @contextlib.contextmanager
    def lock(
        self,
        key: str,
        ttl: float = core.DEFAULT_TTL,
        wait: float | None = None,
        shared: bool = False,
        limit: int | None = None,
        permits: int | None = None,
    ) -> Iterator[Hold]:
        """Holds ``key`` for the ``with`` block: acquires it, waiting up to ``wait`` seconds
        (None: no limit; 0: try once), renews it every ttl/3 in the background, and releases
        it on exit. ``shared=True`` takes a shared hold (a read lock), ``limit=n`` a permit of
        an n-permit semaphore (one server or a cluster only), ``permits=p`` (with a limit) p
        of them at once. Raises ``NotAcquired`` when the
        lock was not granted in time; check ``hold.lost`` (or call ``hold.check()``) in long
        work."""
        hold = self._acquire(key, ttl, wait, shared, limit, permits, raise_busy=True)
        assert hold is not None
        try:
            yield hold
        finally:
            hold._close()

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def acquire(
        self,
        key: str,
        ttl: float = core.DEFAULT_TTL,
        wait: float | None = None,
        shared: bool = False,
        limit: int | None = None,
        permits: int | None = None,
    ) -> Hold | None:
        """Like ``lock()`` without the ``with``: the ``Hold`` (renewed in the background until
        ``hold.release()``), or None when the lock was not granted within ``wait``."""
        return self._acquire(key, ttl, wait, shared, limit, permits, raise_busy=False)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _acquire(
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
                    rnd = self._round(["LOCK.ACQUIRE", key, owner, ttl_ms, *mode])
                else:
                    rnd = self._wait_round(key, owner, ttl_ms, remaining, mode)
                until = rnd.valid_until(ttl_s)
                if rnd.granted_late(ttl_s):
                    # Granted after a long wait: the ttl counts from a grant we did not see, so
                    # measure the validity with a renewal.
                    renewal = self._round(["LOCK.RENEW", key, owner, ttl_ms])
                    until = renewal.valid_until(ttl_s)
                    if until is None:
                        rnd = renewal
                if until is not None:
                    tokens = {self._names[i]: int(t) for i, t in sorted(rnd.agreed.items())}
                    return (make or Hold)(self, key, owner, ttl_s, tokens, until, mode)
                self._release_failed(key, owner, rnd, ttl_s)
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
            time.sleep(pause)

    # --- elections ------------------------------------------------------------------------

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def campaign(self, key: str, value: str, ttl: float = core.DEFAULT_TTL, timeout: float | None = None) -> Leadership:
        """Stands for leader of the election ``key`` as ``value`` (a name, an address) and
        returns once this candidate leads: ``LOCK.WAIT`` with the owner ``<value>/<random>``,
        candidates served in arrival order, waiting up to ``timeout`` seconds (None: no
        limit; ``NotAcquired`` when it passes, and the candidate leaves the queue). The
        ``Leadership`` is a hold: ``term`` (its fencing token: hand it to whatever the leader
        writes), ``lost`` and ``reason`` (renewed every ttl/3 in the background),
        ``resign()``. One master or a cluster only, and an exclusive key (``InvalidArgument``
        over Redlock masters, ``ServerError`` on a shared key). With ``replica_acks``, it
        returns only once that many replicas acknowledged the grant; a grant they did not
        acknowledge is released and ``NotAcknowledged`` raised."""
        core.check_key(key)
        core.check_election(key, len(self._servers), "campaign")
        core.candidate_owner(value)
        # A shared key is refused here (ServerError); one that turns shared after this look
        # queues the candidate behind its readers, as any exclusive wait.
        self._leader(key)
        hold = self._acquire(
            key, ttl, timeout, False, None, None, raise_busy=True, owner_of=lambda: core.candidate_owner(value), make=Leadership
        )
        assert isinstance(hold, Leadership)
        return hold

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def leader(self, key: str) -> Leader | None:
        """The leader of the election ``key`` (LOCK.INFO): its ``value``, ``term``, ``owner``,
        ``ttl`` left and the candidates queued (``waiters``); None when nobody leads."""
        core.check_key(key)
        core.check_election(key, len(self._servers), "leader")
        return self._leader(key)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _leader(self, key: str) -> Leader | None:
        return (self._query_each(key, ["LOCK.INFO", key], lambda name, r: core.parse_leader(key, name, r)))[0]

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 4299664cb98f:
    # returns an Observer that stop() ends from another thread (cutting a blocked LOCK.OBSERVE);
    # asyncio's is an async generator ended by cancellation
    def observe(self, key: str) -> Observer:
        """The leaders of the election ``key`` as they change, for ``for``: first the leader
        now (a ``LeaderChange`` whose ``leader`` is None when nobody leads), then one item
        after each change seen, with the latest leader (not every term between two
        wake-ups). ``term_regressed`` marks a term lower than the last one seen (the store
        lost history). Each wait is a finite ``LOCK.OBSERVE`` (5 s at most, or
        half the driver's ``socket_timeout``), asked again on a timeout or a lost connection
        without reporting a change. Returns an ``Observer``: iterate it, and call its
        ``stop()`` from any thread to end the iteration (a blocked ``LOCK.OBSERVE`` is cut at
        once); a ``with`` block stops it on exit."""
        core.check_key(key)
        core.check_election(key, len(self._servers), "observe")
        observer = Observer(key)
        observer._changes = self._observe(key, observer)
        return observer

    def _observe(self, key: str, observer: Observer) -> Iterator[LeaderChange]:
        s = self._servers[0]
        every = core.observe_every(s.socket_timeout)
        seen = core.Observation(key)
        while True:
            args: list[Any] = ["LOCK.INFO", key]
            if seen.started:
                args = ["LOCK.OBSERVE", key, seen.known, int(every * 1000)]
            cancel = observer._next_call()
            if cancel is None:
                return
            try:
                reply = s.call(args, every + max(self.node_timeout, 1.0), cancel, connect_within=max(self.node_timeout, 1.0))
            except Exception as e:  # noqa: BLE001
                if observer.stopped:
                    return
                failure = core.classify(e, s.cluster)
                if failure.permanent:
                    if core.error_text(e).startswith("lock is shared"):
                        raise core.shared_election(key, s.name) from e
                    raise core.server_error(key, s.name, e) from e
                if not failure.timeout and observer._stop.wait(core.jitter(self.retry_delay)):
                    return
                continue  # cut: asked again, nothing reported
            if observer.stopped:
                return
            change = seen.see(core.parse_leader(key, s.name, reply))
            if change is not None:
                yield change

    # --- several keys ---------------------------------------------------------------------

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @contextlib.contextmanager
    def lock_all(
        self, keys: Sequence[str], ttl: float = core.DEFAULT_TTL, wait: float | None = None
    ) -> Iterator[GroupHold]:
        """Holds every key of ``keys`` exclusively for the ``with`` block, all or none, under
        one owner: ``LOCK.MACQUIRE`` takes free keys in one step with one token; when some
        are taken and ``wait`` allows, the keys are waited for one by one in one global order
        (their UTF-8 bytes, as every relock client orders them), so two groups that overlap
        never deadlock, and what was taken is given back on failure. Renewed together every
        ttl/3, released together on exit; raises ``NotAcquired`` when not granted in time.
        In a Redis Cluster the keys must share a hash slot (a ``{hash tag}``)."""
        hold = self._acquire_all(keys, ttl, wait, raise_busy=True)
        assert hold is not None
        try:
            yield hold
        finally:
            hold._close()

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def acquire_all(
        self, keys: Sequence[str], ttl: float = core.DEFAULT_TTL, wait: float | None = None
    ) -> GroupHold | None:
        """Like ``lock_all()`` without the ``with``: the ``GroupHold``, or None when the keys
        were not all granted within ``wait``."""
        return self._acquire_all(keys, ttl, wait, raise_busy=False)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
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

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _acquire_all(self, keys: Sequence[str], ttl: float, wait: float | None, raise_busy: bool) -> GroupHold | None:
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
                rnd = self._round(["LOCK.MACQUIRE", n, *group, owner, ttl_ms], accept=tokens_of)
            except BaseException:
                # Cancelled or interrupted while it was under way: given back in the background.
                self._release_late(group[0], owner, None, release)
                raise
            until = rnd.valid_until(ttl_s)
            if until is not None:
                return GroupHold(self, group, owner, ttl_s, next(iter(rnd.agreed.values())), until)
            now_, later = rnd.give_back()
            if any(now_):
                self._round(release, targets=now_, until_all=True)
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
                got = self._wait_each(group, owner, ttl_ms, deadline)
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
            time.sleep(pause)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _wait_each(self, group: list[str], owner: str, ttl_ms: int, deadline: float | None) -> GroupHold | str:
        """Waits for ``group``'s keys one by one in wait order under ``owner``, keeping the
        keys already taken alive (a wait is cut into ttl/3 pieces with a renewal between).
        The group, ``"timeout"`` or ``"again"`` (a key taken early was lost, or a wait failed:
        start over under a new owner); what was taken is given back unless the group is
        returned. ``owner`` asks for nothing again once a give-back of its runs in the
        background, which could end the new grant after the group was returned."""
        ttl_s = ttl_ms / 1000
        taken: list[str] = []
        tokens: dict[str, int] = {}

        def give_back() -> None:
            if taken:
                release = ["LOCK.MRELEASE", len(taken), *taken, owner, "FROM", 1]
                self._round(release, until_all=True)
                self._release_late(taken[0], owner, None, release)

        def all_of(want: int) -> Callable[[Any], Any]:
            return lambda r: r if r is not None and int(r) == want else None

        try:
            for key in core.wait_order(group):
                while True:
                    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if remaining == 0.0:
                        give_back()
                        return "timeout"
                    piece = remaining
                    if taken:
                        piece = ttl_s / 3 if remaining is None else min(remaining, ttl_s / 3)
                    rnd = self._wait_round(key, owner, ttl_ms, piece, [])
                    if rnd.won():
                        taken.append(key)
                        tokens[key] = int(next(iter(rnd.agreed.values())))
                        break
                    if rnd.permanently_failed():
                        give_back()
                        raise rnd.permanent_error(key)
                    not_acked = rnd.acks_error(key)
                    if not_acked is not None:
                        # Granted, not acknowledged, taken back: raised at once, as the
                        # group's first try does.
                        give_back()
                        raise not_acked
                    if rnd.some_failed():
                        # The wait may be granted still (its reply lost, or not come in
                        # time): given back in the background, now and once more a little
                        # later, under this owner, which therefore asks for nothing again
                        # (that later give-back would end the new grant): what was taken
                        # is given back too, and the group starts over under a new owner.
                        self._release_late(key, owner, None, ["LOCK.RELEASE", key, owner, "FROM", 1], ttl=ttl_s)
                        give_back()
                        time.sleep(min(core.jitter(self.retry_delay), remaining if remaining is not None else 1e9))
                        return "again"
                    if taken:
                        renewal = self._round(["LOCK.MRENEW", len(taken), *taken, owner, ttl_ms], accept=all_of(len(taken)))
                        if renewal.renew_verdict() == "lost":
                            give_back()
                            return "again"
            # The first keys' ttl ran while later ones were waited for: measure the validity.
            renewal = self._round(["LOCK.MRENEW", len(group), *group, owner, ttl_ms], accept=all_of(len(group)))
            until = renewal.valid_until(ttl_s)
            if until is None:
                give_back()
                return "again"
            return GroupHold(self, group, owner, ttl_s, {k: tokens[k] for k in group}, until)
        except BaseException:
            # Cancelled, interrupted or failed: whatever was taken, or lands, is given back in
            # the background.
            self._release_late(group[0], owner, None, ["LOCK.MRELEASE", len(group), *group, owner, "FROM", 1])
            raise

    # --- rounds ---------------------------------------------------------------------------

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin ac30cd517c54:
    # takes a _Cancel and connect_within (a blocking call cut from another thread); asyncio's
    # timeouts are asyncio.TimeoutError
    def _ask(
        self,
        i: int,
        args: Sequence[Any],
        timeout: float | None,
        cancel: _Cancel | None = None,
        connect_within: float | None = None,
        accept: Callable[[Any], Any] | None = None,
        undo: Sequence[Any] | None = None,
    ) -> tuple[Any, Failure | None]:
        acks = self._acks if self._acks is not None and str(args[0]).upper() in core.ACKED else None
        try:
            reply = self._servers[i].call(args, timeout, cancel, connect_within, undo, acks)
            return (reply if accept is None else accept(reply)), None
        except core.NotAcked as e:
            return self._not_acked(i, args, e, accept)
        except Exception as e:  # noqa: BLE001 - every failure is a failed server
            return None, core.classify(e, self._servers[i].cluster)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _not_acked(
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
                connected = core.connected_replicas(s.role(core.acked_key(args), self.node_timeout))
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
            s.call(undo, self.node_timeout)
        except Exception:  # noqa: BLE001 - asked again in the background
            self._release_late(core.acked_key(args), str(undo[-3]), [j == i for j in range(len(self._servers))], undo)
            return None, core.acks_failure(e, self._acks[1], f"{what} (in the background: no answer yet)")
        return None, core.acks_failure(e, self._acks[1], what, settled=True)

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin ae57cd847057:
    # fans out on worker pools (concurrent.futures), renewals on workers of their own; asyncio
    # spawns a task per request
    def _round(
        self,
        args: Sequence[Any],
        targets: Sequence[bool] | None = None,
        until_all: bool = False,
        timeout: float | None | Literal["node"] = "node",
        connect_within: float | None = None,
        accept: Callable[[Any], Any] | None = None,
        background: bool = False,
        undo: Sequence[Any] | None = None,
    ) -> Round[Any]:
        """``args`` on every server (those ``targets`` selects) at once, each bounded by the
        node timeout (or ``timeout``; None: no bound), connecting included, until a quorum is
        won or lost (or, ``until_all``, every server answered). A request still under way then
        goes on to its end, within its own bound (a late grant still lands, to be released by
        the paths that address every server). ``accept`` turns a reply into the value agreed
        (None: refused). ``background``: a renewal's or a background release's round, whose
        requests run on workers of their own, never queued behind the callers'."""
        rnd: Round[Any] = Round(self._names, time.monotonic(), until_all)
        # A wait without limit has no bound; everything else is bounded by the node timeout
        # (and the replica acknowledgements' wait, for a write that waits for them).
        t = self.node_timeout + self._ack_time(args) if isinstance(timeout, str) else timeout
        if len(self._servers) == 1:
            if targets is not None and not targets[0]:
                rnd.on_reply(0, None)
            else:
                value, failure = self._ask(0, args, t, None, connect_within, accept, undo)
                rnd.on_reply(0, value, failure)
            return rnd.finish(time.monotonic())
        workers = self._background if background else self._io
        pending: dict[cf.Future[tuple[Any, Failure | None]], int] = {}
        for i in range(len(self._servers)):
            if targets is not None and not targets[i]:
                rnd.on_reply(i, None)
                continue
            pending[workers.submit(self._ask, i, args, t, None, connect_within, accept, undo)] = i
        bound = None if t is None else time.monotonic() + t + 0.05
        while pending and rnd.progress() == "pending":
            left = None if bound is None else max(0.0, bound - time.monotonic())
            done, _ = cf.wait(list(pending), timeout=left, return_when=cf.FIRST_COMPLETED)
            if not done:
                for f, i in pending.items():
                    rnd.on_reply(i, None, Failure(f"no reply within {t} s", timeout=True))
                break
            for f in done:
                value, failure = f.result()
                rnd.on_reply(pending.pop(f), value, failure)
        return rnd.finish(time.monotonic())

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _ack_time(self, args: Sequence[Any]) -> float:
        """How long ``args`` may wait for replica acknowledgements after its reply."""
        return self._acks[1] if self._acks is not None and str(args[0]).upper() in core.ACKED else 0.0

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 9ec08706fc7a:
    # each Redlock wait blocks a worker of its own and is cut by a _Cancel, the waits cut off topped
    # up (_top_up); asyncio cancels tasks
    def _wait_round(self, key: str, owner: str, ttl_ms: int, remaining: float | None, mode: list[str]) -> Round[Any]:
        args = ["LOCK.WAIT", key, owner, ttl_ms, core.wait_ms(remaining), *mode]
        bound = None if remaining is None else remaining + WAIT_GRACE + self.node_timeout + self._ack_time(args)
        # A wait may block long; connecting may not (a stopped master still accepts).
        within = self.node_timeout
        if len(self._servers) == 1:
            return self._round(args, timeout=bound, connect_within=within)
        # Several masters: once one granted, the others get max_partial_hold (at most ttl/4)
        # to make a quorum; the waits still under way then are cut off (their connections
        # closed, which takes us out of those queues) and whatever landed is released. Each
        # wait blocks a worker of its own (never one the renewals need).
        rnd: Round[Any] = Round(self._names, time.monotonic())
        cancels = [_Cancel() for _ in self._servers]
        pending: dict[cf.Future[tuple[Any, Failure | None]], int] = {}
        try:
            for i in range(len(self._servers)):
                pending[self._waits.submit(self._ask, i, args, bound, cancels[i], within)] = i
            partial = min(self.max_partial_hold, ttl_ms / 4000)
            cut_at: float | None = None
            while pending and rnd.progress() == "pending":
                left = None if cut_at is None else max(0.0, cut_at - time.monotonic())
                done, _ = cf.wait(list(pending), timeout=left, return_when=cf.FIRST_COMPLETED)
                if not done:
                    break
                for f in done:
                    value, failure = f.result()
                    rnd.on_reply(pending.pop(f), value, failure)
                if rnd.agreed and cut_at is None:
                    cut_at = time.monotonic() + partial
        finally:
            # Decided, or this thread interrupted (KeyboardInterrupt, a signal handler's
            # exception): no wait may stay queued for an owner nobody waits for any more.
            for i in pending.values():
                cancels[i].cancel()
        cut = list(pending.values())
        for i in cut:
            if rnd.progress() == "pending":
                rnd.on_reply(i, None, Failure("no quorum within the partial-hold limit", timeout=True))
        rnd.finish(time.monotonic())
        if rnd.won() and cut:
            self._top_up(rnd, ["LOCK.ACQUIRE", key, owner, ttl_ms, *mode], cut)
        return rnd

    def _top_up(self, rnd: Round[Any], acquire: list[Any], cut: list[int]) -> None:
        """A wait won by a quorum cut the waits of the other masters (their connections
        closed: the server drops those waiters, and revokes a grant whose reply did not reach
        us). A hold on a bare quorum would end with one more master paused, so the same owner
        asks those masters once more with ``LOCK.ACQUIRE``, which confirms a grant that landed
        (same token) or takes the key where it is free and nobody queues: the hold is kept by
        as many masters as will grant it."""
        extra = self._round(acquire, targets=[i in cut for i in range(len(self._servers))], until_all=True)
        for i, token in extra.agreed.items():
            rnd.add_grant(i, token)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _give_back(self, key: str, owner: str, ttl: float | None = None) -> None:
        """An acquisition cut short (cancelled, interrupted): whatever ``owner`` was granted,
        or may yet be, is released in the background, asked again until every server
        answered or the lease would have ended."""
        with contextlib.suppress(BaseException):
            self._release_late(key, owner, None, ttl=ttl)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _release_failed(self, key: str, owner: str, rnd: Round[Any], ttl: float) -> None:
        """A failed round's grants given back, under its owner, which asks for nothing again
        (a fresh owner's grant: count 1, so ``FROM 1``)."""
        now, later = rnd.give_back()
        if any(now):
            done = self._round(["LOCK.RELEASE", key, owner, "FROM", 1], targets=now, until_all=True)
            unanswered = done.unanswered()
            if any(unanswered):
                self._release_late(key, owner, unanswered, ttl=ttl)
        if any(later):
            self._release_late(key, owner, later, ttl=ttl)

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 84235581bc21:
    # submits to the background workers; asyncio spawns a task
    def _release_late(
        self, key: str, owner: str, targets: list[bool] | None, args: list[Any] | None = None, ttl: float | None = None
    ) -> None:
        """Releases ``owner``'s grants in the background: every server of ``targets`` is asked
        until it answered (a server stalled, a connection that cannot open yet) or until the
        lease (``ttl`` from now at most) would have ended anyway; and once more a little
        later, since a server may still grant a request whose round we stopped waiting for:
        ``owner`` must ask for nothing again (that later give-back would end its new grant).
        ``args``: the release command, when not ``LOCK.RELEASE key owner FROM 1`` (a fresh
        grant)."""
        release = args or ["LOCK.RELEASE", key, owner, "FROM", 1]
        until = time.monotonic() + (core.DEFAULT_TTL if ttl is None else ttl)
        # A step of a hold's count: its next section's entry waits for it (Hold._settle_steps)
        # until it is done, repeat included; or, with several masters, when its first try left
        # one unanswered (down: a Redlock hold goes on without it, and a count it gets wrong
        # is outvoted), until that first try ended, so that it does not hold up every entry
        # for the ttl. With one server the entry needs that server anyway: it waits.
        step = core.count_step(release)
        if step is not None:
            with self._late_lock:
                self._late_steps[step] = self._late_steps.get(step, 0) + 1
        pending = [step is not None]

        def settled() -> None:
            with self._late_lock:
                if step is not None and pending[0]:
                    pending[0] = False
                    self._late_steps[step] -= 1
                    if not self._late_steps[step]:
                        del self._late_steps[step]

        def later() -> None:
            try:
                self._give_back_until(release, targets, until, settled if len(self._servers) > 1 else None)
                time.sleep(0.1)
                self._give_back_until(release, targets, until)
            finally:
                settled()

        try:
            self._background.submit(later)
        except BaseException:  # not submitted (the interpreter finalizing): nothing is given back
            settled()
            raise

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _give_back_until(
        self, release: list[Any], targets: list[bool] | None, until: float, unanswered: Callable[[], None] | None = None
    ) -> None:
        """``release`` on ``targets`` until each answered or ``until`` passed; ``unanswered``
        is called when the first try left a server without an answer."""
        left = [True] * len(self._servers) if targets is None else list(targets)
        pause = 0.02
        first = True
        while any(left):
            rnd = self._round(release, targets=left, until_all=True, background=True)
            left = [a and u for a, u in zip(left, rnd.unanswered())]
            if first and any(left) and unanswered is not None:
                unanswered()
            first = False
            if not any(left) or time.monotonic() + pause >= until:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    # --- looking at locks -----------------------------------------------------------------

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _query_each(self, key: str, args: Sequence[Any], parse: Callable[[str, Any], T], once: bool = False) -> list[T]:
        """``args`` on every server, each reply parsed. ``once``: a command not safe to run
        twice, sent as a fenced write is (``_Server.fenced``: never again once it may have
        left, whatever the driver would do); a lost reply raises at once."""
        out = []
        for s in self._servers:
            try:
                if once:
                    reply = s.fenced(key, args, max(self.node_timeout, 1.0))
                else:
                    reply = s.call(args, max(self.node_timeout, 1.0))
            except core.Unanswered as e:
                raise core.fenced_unanswered(key, s.name, e, str(args[0])) from e
            except Exception as e:  # noqa: BLE001
                raise core.server_error(key, s.name, e) from e
            out.append(parse(s.name, reply))
        return out

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def info(self, key: str) -> LockInfo | None:
        """LOCK.INFO: the lock at ``key``, or None. With Redlock, the first server's that has
        one (``info_each`` gives every server's)."""
        return next((i for i in self.info_each(key) if i is not None), None)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def info_each(self, key: str) -> list[LockInfo | None]:
        """LOCK.INFO on every server, in the client's order."""
        return self._query_each(key, ["LOCK.INFO", key], core.parse_info)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def holders(self, key: str, count: int = 0) -> list[Holder]:
        """LOCK.HOLDERS: who holds ``key``, in grant order (``count`` 0: all), on every server."""
        lists = self._query_each(key, ["LOCK.HOLDERS", key, "COUNT", count], core.parse_holders)
        return [h for hs in lists for h in hs]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def waiters(self, key: str, count: int = 0) -> list[Waiter]:
        """LOCK.WAITERS: who waits for ``key``, in queue order, on every server. A server
        without LOCK.WAITERS (a module older than it) raises ``ServerError``."""
        lists = self._query_each(key, ["LOCK.WAITERS", key, "COUNT", count], core.parse_waiters)
        return [w for ws in lists for w in ws]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def force_release(self, key: str, owner: str | None = None) -> int:
        """LOCK.FORCERELEASE on every server: removes every hold of ``key`` (or only
        ``owner``'s) and returns how many were removed in all. For operators. Sent at most
        once to each server, as a fenced write is: run again after its reply was lost, it
        would remove a hold another owner took since (redis-py's cluster client re-sent it).
        A reply lost (no reply in time, or the connection ended first) raises
        ``ServerError`` saying it may have run and was not sent again: look (``holders``)
        before you force-release again."""
        args = ["LOCK.FORCERELEASE", key] + ([owner] if owner is not None else [])
        return sum(self._query_each(key, args, lambda _s, r: int(r), once=True))

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def history(self, key: str, count: int = 10) -> list[LogEntry]:
        """LOCK.HISTORY: the journal's entries for ``key`` (holds that ended other than by
        their owner, and flushes), newest first, on every server."""
        lists = self._query_each(key, ["LOCK.HISTORY", key, count], core.parse_log)
        return [e for es in lists for e in es]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def log(self, count: int = 10) -> list[LogEntry]:
        """LOCK.LOG (an admin command): the journal of every key, newest first, on every
        server (every primary of a cluster)."""
        return [e for name, r in self._each_node(["LOCK.LOG", count]) for e in core.parse_log(name, r)]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def reset_log(self) -> None:
        """LOCK.LOG RESET on every server: empties the journals."""
        self._each_node(["LOCK.LOG", "RESET"])

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def stats(self, count: int = 10) -> list[KeyStats]:
        """LOCK.STATS (an admin command): the hottest keys by total wait time on every server,
        hottest first on each."""
        return [k for name, r in self._each_node(["LOCK.STATS", "COUNT", count]) for k in core.parse_stats(name, r)]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _each_node(self, args: Sequence[Any]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for s in self._servers:
            try:
                out += s.call_nodes(args, max(self.node_timeout, 1.0))
            except Exception as e:  # noqa: BLE001
                raise core.server_error(None, s.name, e) from e
        return out

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _history(self, keys: Sequence[str], owner: str, since: float) -> LossReason:
        """Why ``owner``'s hold of ``keys`` ended, from LOCK.HISTORY: one pipelined round trip
        per server (at most the node timeout each), stopping at the first that knows."""
        asked = False
        for s in self._servers:
            try:
                replies = s.call_many([["LOCK.HISTORY", k, 100] for k in keys], self.node_timeout)
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

    def close(self) -> None:
        """Closes relock's own connections (releases nothing: release your holds first). The
        clients passed in stay open; relock's worker threads end by themselves once idle."""
        for s in self._servers:
            s.close()


class _LossEvent(threading.Event):
    """``hold.lost``: set when the hold is known lost, and reads as set from the moment its
    validity ended (a process stalled past it, by GIL-holding work or a suspended VM, sees it
    at once, before the renewal thread runs) and in a forked child."""

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def __init__(self, hold: Hold) -> None:
        super().__init__()
        self._hold = weakref.ref(hold)

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 1175c46c5e37:
    # a thread that reads lost sets the reason at once (there is no task to wake); asyncio sets it
    # in check()
    def is_set(self) -> bool:
        if super().is_set():
            return True
        h = self._hold()
        if h is None or not h._expired():
            return False
        if h._pid == os.getpid():
            h._lose(h._expiry_reason())
        return True

    isSet = is_set

    def wait(self, timeout: float | None = None) -> bool:
        h = self._hold()
        if h is None:
            return super().wait(timeout)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.is_set():
                return True
            left = h._lost_at() - time.monotonic()
            if end is not None:
                left = min(left, end - time.monotonic())
                if left <= 0:
                    return self.is_set()
            if super().wait(max(0.0, left)):
                return True


class Hold:
    """A lock held by this process: its key, owner and fencing token, renewed in the
    background until released.

    - ``token``: the fencing token (with Redlock, the largest of the granting servers'
      tokens, so that it grows from one holder to the next; ``tokens`` has every server's).
      Send it with every write to what the lock protects.
    - ``lost``: a ``threading.Event`` set the moment the hold is known lost, and at the
      latest a little before its validity ends; ``reason`` then says why.
    - ``check()`` raises ``LockLost`` once it is lost; ``renew()`` and ``release()`` act now.
    """

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 81f180f0b992:
    # threading locks, registered with the renewal thread; asyncio: asyncio locks and a renewal task
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
        # The largest (docs/safety.md): every master's counter is floored at the wall clock
        # and a later holder is minted newer tokens where the quorums overlap; the first
        # master's token alone can be older than the previous holder's.
        self.token: int = max(tokens.values())
        self.valid_until = valid_until
        self.reason: str | None = None
        self.loss: LossReason | None = None
        self.shared = bool(mode)
        self._mode = mode
        self._since = time.time()  # granted just before: an older flush is not its end (1 s slack for clocks)
        self._pid = os.getpid()
        self._state = threading.Lock()
        self._released = False
        # The servers said it is gone and the journals are being asked why
        # (_lose_with_history): check() raises from then on.
        self._known: str | None = None
        self._renewing = False
        # One renewal at a time (the background one or renew()): the client applies them in
        # the order the server did, so a late reply never extends the validity.
        self._renew_lock = threading.Lock()
        # The hold count the server has (1 + the reenter() sections open), and one step of it
        # (LOCK.REENTER, LOCK.RELEASE) at a time: each is sent with FROM <count>, so a step
        # sent twice (a driver, a proxy, a retry) is applied once.
        self._count = 1
        self._step = threading.Lock()
        self._last_failure: str | None = None
        self._next = time.monotonic() + max(ttl / 3, 0.001)
        self.lost: threading.Event = _LossEvent(self)
        client._renewer.add(self)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def __repr__(self) -> str:
        return f"Hold(key={self.key!r}, owner={self.owner!r}, token={self.token})"

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def __enter__(self) -> Hold:
        return self

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def __exit__(self, *exc: object) -> None:
        self._close()

    # --- state ----------------------------------------------------------------------------

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _lost_at(self) -> float:
        return self.valid_until - core.loss_lead(self.ttl)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _expired(self) -> bool:
        if self._pid != os.getpid():
            return True
        return not self._released and time.monotonic() >= self._lost_at()

    def _next_due(self) -> float:
        if self._renewing:
            return self._lost_at()
        return min(self._next, self._lost_at())

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def is_valid(self) -> bool:
        """Whether the hold is still ours for sure: not lost, not released, within validity."""
        return not self._released and not self.lost.is_set()

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def cause(self) -> str | None:
        """The server's word for the loss (``loss.cause``): ``expired``, ``forcereleased``,
        ``deleted``, ``flushed``, ...; None while held, or when nobody can say."""
        return None if self.loss is None else self.loss.cause

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def who(self) -> Who | None:
        """The client that ended the hold (``loss.who``), where the server could tell."""
        return None if self.loss is None else self.loss.who

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def keys(self) -> list[str]:
        """The keys held: ``[key]``, or a group's keys in the order given."""
        return [self.key]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _renew_args(self, ttl_ms: int) -> list[Any]:
        return ["LOCK.RENEW", self.key, self.owner, ttl_ms]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _release_args(self) -> list[Any]:
        return ["LOCK.RELEASE", self.key, self.owner, "FROM", self._count]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _all_held(self, reply: Any) -> Any:
        """A renewal's or release's reply as agreed (the reply) or refused (None)."""
        return reply

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _refused_words(self, servers: list[str]) -> str:
        return f"LOCK.RENEW answered nil on {', '.join(servers)}: the lock expired or was taken away"

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin a744b6e241af:
    # under the state lock (the renewal thread races the holder), and leaves the renewal thread's
    # list
    def _lose(self, reason: str, loss: LossReason | None = None) -> None:
        with self._state:
            if self._released or threading.Event.is_set(self.lost):
                return
            self.reason = reason
            self.loss = loss
            threading.Event.set(self.lost)
        self._client._renewer.remove(self)
        # Whatever servers still have it should not keep it until the ttl.
        self._client._release_late(self.key, self.owner, None, self._release_args(), ttl=self.ttl)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
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

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _expiry_reason(self, renewing: bool = False) -> str:
        """Why the validity ran out: renewals that failed (what failed, even when another
        was under way at the end), or one that went unanswered (``renewing``: under way when
        it ended), not a process or an event loop that did not run the renewal in time."""
        if self._last_failure:
            return f"its validity ran out: renewals failed ({self._last_failure})"
        if renewing or self._renewing:
            return "its validity ran out during a renewal that no quorum answered"
        return self._stall_reason()

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _stall_reason(self) -> str:
        return (
            f"its validity ran out before it could be renewed ({_NOT_RENEWED} the {self.ttl:g} s ttl?)"
        )

    # --- renewal --------------------------------------------------------------------------

    def _on_due(self, now: float) -> None:
        """Called by the renewal thread when this hold's next renewal or loss deadline came."""
        if self._released or self._pid != os.getpid():
            self._client._renewer.remove(self)
            return
        if now >= self._lost_at():
            self._lose(self._expiry_reason())
            return
        if self._renewing:
            return
        self._renewing = True
        try:
            self._client._background.submit(self._renew_in_background)
        except RuntimeError:
            self._renewing = False

    def _renew_in_background(self) -> None:
        try:
            self._renew_round(self.ttl, background=True)
        except Exception:  # noqa: BLE001 - a loss is reported through .lost
            pass
        finally:
            self._renewing = False
            self._client._renewer.poke(self._next_due())

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin a239cb546d3b:
    # the renewal thread's round (background=True) schedules the next one itself and renew() raises
    # from inside; asyncio's returns a verdict to its loop
    def _renew_round(self, ttl: float, background: bool) -> None:
        ttl_ms = core.check_ttl(ttl)
        ttl_s = ttl_ms / 1000
        if self._pid != os.getpid() or self._released:
            self.check()
        with self._renew_lock:
            self._renew_locked(ttl_ms, ttl_s, background)

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 6b2bae6e3430:
    # the renewal thread's round (background=True) schedules the next one itself and renew() raises
    # from inside; asyncio's returns a verdict to its loop
    def _renew_locked(self, ttl_ms: int, ttl_s: float, background: bool) -> None:
        if self._pid != os.getpid() or self._released:
            self.check()
        if time.monotonic() >= self.valid_until:
            # An expired validity is never extended: someone else may hold it now.
            self._lose(self._stall_reason())
            self.check()
        rnd = self._client._round(self._renew_args(ttl_ms), accept=self._all_held, background=True)
        until = rnd.valid_until(ttl_s)
        now = time.monotonic()
        every = max(self.ttl / 3, 0.001)
        if until is not None:
            with self._state:
                if self._released:
                    return
                # Lost while the round ran (its validity ran out, and it is being given back):
                # the servers' renewal, applied before that give-back, does not revive it.
                kept = not threading.Event.is_set(self.lost) and time.monotonic() < self._lost_at()
                if kept:
                    self.ttl = ttl_s
                    self.valid_until = until
                    self._next = now + max(ttl_s / 3, 0.001)
                    self._last_failure = None
            if not kept:
                self.check()  # raises LockLost, declaring the loss if nobody did yet
            return
        if rnd.bad_ttl() and not background:
            # The servers refused the ttl and changed nothing: the hold is still ours.
            raise rnd.bad_ttl_error(self.key, ttl_s, self.ttl)
        if not rnd.bad_ttl() and rnd.renew_verdict() == "lost":
            self._lose_with_history(rnd)
            self.check()
        # Only unanswered: try again soon while validity is left.
        self._last_failure = rnd.describe()
        left = max(0.0, self.valid_until - now)
        self._next = now + min(every / 4, left / 2)
        if not background:
            raise NotAcquired(
                f"lock {self.key!r}: renewal failed ({rnd.describe()}); the hold stays valid until its validity ends",
                key=self.key,
                servers=rnd.servers(lambda f: not f.refused),
            )

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _lose_with_history(self, rnd: Round[Any]) -> None:
        """The hold is gone: asks the journal why (one bounded round trip) and says it."""
        refused = rnd.servers(lambda f: f.refused)
        what = self._refused_words(refused) if refused else f"renewal failed: {rnd.describe(lambda f: f.permanent)}"
        # check() raises from here while the journals are asked why (up to a node timeout
        # per server, a stopped one first in line); `lost` is set with the reason.
        self._known = self._known or what
        loss = self._client._history(self.keys, self.owner, self._since)
        where = f"key {loss.entry.key!r} " if loss.entry is not None and len(self.keys) > 1 and loss.entry.key else ""
        self._lose(f"{what}: {where}{loss.message}", loss)

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin a80a165d2f32:
    # the renewal round raises itself (background=False); asyncio's returns a verdict
    def renew(self, ttl: float | None = None) -> None:
        """Renews now (``ttl`` seconds from now, default the hold's ttl; it becomes the
        hold's ttl). Raises ``LockLost`` when the hold is gone, ``NotAcquired`` (retryable)
        when servers did not answer, ``ServerError`` (not retryable) when they refused the
        ttl (longer than ``relock.restart-grace-ms``: the hold is kept, with its ttl); the
        background renewal goes on either way."""
        self._renew_round(self.ttl if ttl is None else ttl, background=False)

    # --- release --------------------------------------------------------------------------

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def release(self) -> bool:
        """Stops the renewal and releases the hold on every server. Returns True when a
        quorum released it, False when it was no longer held (lost, or released before) or
        servers did not answer (released there again in the background). Raises
        ``ServerError`` (not retryable) when servers refused the release with errors
        retrying cannot fix (``NOPERM``...) and those alone leave no quorum: the lock stays
        held there until its ttl runs out (a minority of them, with other servers that did
        not answer, is False: those are asked again in the background). In a forked child
        it does nothing and returns False: the hold is the parent's."""
        return self._end(None)

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 03f728ad807e:
    # under the state lock; an interrupt (Ctrl-C) moves the release to a thread of its own; asyncio
    # shields a task of its own
    def _end(self, reason: str | None) -> bool:
        """Ends the hold: ``reason`` (an end the holder did not ask for: the interpreter
        exiting) is signalled first (``lost`` set), then the hold is released; servers that
        do not answer are asked again in the background until they do or the lease ends."""
        if self._pid != os.getpid():
            return False
        with self._state:
            if self._released:
                return False
            if reason is not None and not threading.Event.is_set(self.lost):
                self.reason = reason
                threading.Event.set(self.lost)
            self._released = True
        try:
            rnd = self._release_whole()
        except BaseException:
            # Interrupted (Ctrl-C) while releasing, or while waiting for another thread's
            # step: the whole release goes on in the background, in the order of steps.
            threading.Thread(target=self._release_in_background, name="relock release", daemon=True).start()
            raise
        if rnd.won():
            return True
        error = rnd.release_error(self.key)
        if error is not None:
            raise error
        return False

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 6fa239910683:
    # leaves the renewal thread's list first; asyncio gives the release back in the background when
    # its task is cancelled
    def _release_whole(self) -> Round[Any]:
        """The release round(s) under the step: the hold ends whole (see ``_end``)."""
        self._client._renewer.remove(self)
        with self._step:
            # The hold ends whole: a nested section still running (another thread's) has its
            # count taken down too, one FROM step at a time, and its exit then changes nothing.
            tries = 0
            while True:
                release = self._release_args()
                rnd = self._client._round(release, until_all=len(self._client.servers) > 1, accept=self._all_held)
                n = rnd.hold_count() if len(self._client.servers) == 1 else None
                if n is not None and n != self._count and tries < 3:
                    # A step this client no longer counted (one interrupted by Ctrl-C, its
                    # take-back under way): the hold ends whole all the same, from the count
                    # the server has.
                    self._count, tries = n, tries + 1
                    if n >= 1:
                        continue
                if self._count <= 1 or not rnd.won():
                    break
                self._count -= 1
        unanswered = rnd.unanswered()
        if any(unanswered):
            self._client._release_late(self.key, self.owner, unanswered, release, ttl=self.ttl)
        return rnd

    def _release_in_background(self) -> None:
        with contextlib.suppress(Exception):
            self._release_whole()

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 7db9a2581904:
    # asyncio shields the release from a cancellation; threads are not cancelled
    def _close(self) -> None:
        with contextlib.suppress(RelockError):
            self.release()

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def fenced(self, command: str, *args: Any) -> Any:
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
            return s.fenced(key, ["LOCK.FENCED", key, token, command, *args], max(c.node_timeout, 1.0))
        except core.Unanswered as e:
            raise core.fenced_unanswered(key, s.name, e) from e
        except Exception as e:  # noqa: BLE001
            raise core.fenced_error(key, s.name, e) from e

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _fence(self) -> tuple[str, int]:
        """The key and token LOCK.FENCED checks."""
        return self.key, self.token

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin 4f47d78cb08c:
    # the mode changes under the state lock, which the renewal thread reads under
    def downgrade(self) -> None:
        """Turns this exclusive hold into a shared one (LOCK.DOWNGRADE) in one atomic step,
        keeping its token, ttl and count; the readers at the head of the queue are let in
        with it. Allowed on a key without a limit (``OtherLimit`` otherwise); a shared hold
        stays as it is. There is no upgrade: release and acquire exclusively again. Raises
        ``LockLost`` when the hold is gone, ``NotAcquired`` (retryable: downgrading twice is
        safe) when servers did not answer."""
        self.check()
        rnd = self._client._round(["LOCK.DOWNGRADE", self.key, self.owner], until_all=True)
        if rnd.won():
            with self._state:
                self.shared = True
                self._mode = ["SHARED"]
            return
        if rnd.permanently_failed():
            raise rnd.permanent_error(self.key)
        if rnd.renew_verdict() == "lost":
            self._lose_with_history(rnd)
            self.check()
        raise NotAcquired(
            f"lock {self.key!r}: downgrade not answered by a quorum ({rnd.describe()}); retry",
            key=self.key,
            servers=rnd.servers(lambda f: not f.refused),
        )

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin df668cafc5be:
    # the step in runs in the calling thread under the step lock (an interrupt taken back in place);
    # asyncio runs it in a task of its own that a cancellation never cuts
    @contextlib.contextmanager
    def reenter(self) -> Iterator[int]:
        """A nested section under the same owner (LOCK.REENTER): yields the hold count, and
        takes it back down by one on exit. The outer hold keeps renewing. Each step is sent
        with the count it expects (FROM), so no step applies twice; a LOCK.REENTER that got no
        reply in time is taken back on its connection (LOCK.RELEASE FROM count + 1), and the
        section is not entered (``NotAcquired``, retryable). With ``replica_acks``, so is one
        its replicas did not acknowledge (``NotAcknowledged``): the outer hold keeps its count."""
        self.check()
        ttl_ms = core.check_ttl(self.ttl)
        c = self._client
        with self._step:
            self._settle_steps()
            n = self._count
            undo = ["LOCK.RELEASE", self.key, self.owner, "FROM", n + 1]
            try:
                rnd = c._round(["LOCK.REENTER", self.key, self.owner, ttl_ms, *self._mode, "FROM", n], until_all=True, undo=undo)
            except BaseException:
                # Interrupted (Ctrl-C) while the step was under way: it is taken back.
                c._release_late(self.key, self.owner, None, undo, ttl=self.ttl)
                raise
            if not rnd.won():
                # Taken back wherever it may have run: the servers that granted it, and those
                # whose reply was lost (a reset connection); a server where it never ran
                # answers the take-back as a repeat and changes nothing.
                # Under the step, so that no later step meets the count between.
                self._take_back(undo, [g or u for g, u in zip(rnd.agreed_by(), rnd.unanswered())])
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
            self._take_back(undo, [u and not g for g, u in zip(rnd.agreed_by(), rnd.unanswered())])
            self._count = n + 1
            agreed = rnd.agreed_by()
        try:
            yield int(max(rnd.agreed.values()))
        finally:
            if self._pid == os.getpid():
                self._step_out(agreed)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _settle_steps(self) -> None:
        """Under the step, before a section's entry: waits while a step of this hold's count
        is being given back in the background (a section's exit or a re-entry whose reply was
        lost). Such a give-back is sent once more 100 ms after it was answered, FROM the count
        it moved from; an entry asks FROM that same count, and would have its count taken
        back by it (a nested section then refused). Bounded: a give-back ends within the ttl,
        and a hold lost meanwhile raises (``check``)."""
        while (self.key, self.owner) in self._client._late_steps:
            self.check()
            time.sleep(0.01)
        self.check()

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _take_back(self, undo: list[Any], targets: list[bool]) -> None:
        """Under the step: ``undo`` (LOCK.RELEASE FROM count + 1) on ``targets``, and in the
        background where it got no answer."""
        if not any(targets):
            return
        c = self._client
        try:
            done = c._round(undo, targets=targets, until_all=True)
        except BaseException:
            c._release_late(self.key, self.owner, targets, undo, ttl=self.ttl)
            raise
        left = [t and u for t, u in zip(targets, done.unanswered())]
        if any(left):
            c._release_late(self.key, self.owner, left, undo, ttl=self.ttl)

    # by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin c26cda3914aa:
    # the step out runs in the calling thread under the step lock; asyncio's is a task of its own,
    # shielded
    def _step_out(self, agreed: list[bool]) -> None:
        """A nested section's exit: its count taken down by one (LOCK.RELEASE FROM count),
        given back in the background where no reply came; nothing once the hold was ended
        whole (released while the section ran)."""
        c = self._client
        with self._step:
            if self._released:
                return
            m = self._count
            release = ["LOCK.RELEASE", self.key, self.owner, "FROM", m]
            self._count = m - 1
            try:
                done = c._round(release, targets=agreed, until_all=True)
            except BaseException:
                # Interrupted (Ctrl-C) while the step was under way: sent again.
                c._release_late(self.key, self.owner, agreed, release, ttl=self.ttl)
                raise
        unanswered = done.unanswered()
        if any(unanswered):
            c._release_late(self.key, self.owner, unanswered, release, ttl=self.ttl)


class GroupHold(Hold):
    """Several keys held together by one owner (``Relock.lock_all``/``acquire_all``),
    renewed together (LOCK.MRENEW) and released together (LOCK.MRELEASE). ``key`` is the
    first key, ``keys`` all of them; ``key_tokens`` each key's fencing token: one token for
    every key when they were granted in one step, each key its own after a wait. ``token``
    is the largest. A group is lost as soon as one of its keys is."""

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
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

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def __repr__(self) -> str:
        return f"GroupHold(keys={self._keys!r}, owner={self.owner!r}, token={self.token})"

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def __enter__(self) -> GroupHold:
        return self

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def keys(self) -> list[str]:
        return list(self._keys)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _renew_args(self, ttl_ms: int) -> list[Any]:
        return ["LOCK.MRENEW", len(self._keys), *self._keys, self.owner, ttl_ms]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _release_args(self) -> list[Any]:
        return ["LOCK.MRELEASE", len(self._keys), *self._keys, self.owner, "FROM", 1]

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _all_held(self, reply: Any) -> Any:
        return reply if reply is not None and int(reply) == len(self._keys) else None

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _refused_words(self, servers: list[str]) -> str:
        return f"LOCK.MRENEW found part of the group no longer held on {', '.join(servers)}"

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def downgrade(self) -> None:
        raise InvalidArgument("a group of keys is held exclusively: downgrade is for one key")

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @contextlib.contextmanager
    def reenter(self) -> Iterator[int]:
        raise InvalidArgument("a group of keys is not reentrant: hold the group once")
        yield 0  # pragma: no cover

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def _fence(self) -> tuple[str, int]:
        return self._keys[0], self.key_tokens[self._keys[0]]


class Leadership(Hold):
    """A leadership won by ``Relock.campaign()``: the hold of the election's key. ``term`` is
    its fencing token (hand it to whatever the leader writes, or use ``fenced()``), ``value``
    the proclaimed value; ``lost`` is set (with ``reason``) when leadership is lost, and
    ``resign()`` hands it to the next candidate in the same step."""

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def __repr__(self) -> str:
        return f"Leadership(key={self.key!r}, value={self.value!r}, term={self.token})"

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def __enter__(self) -> Leadership:
        return self

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def term(self) -> int:
        """The term: the hold's fencing token, larger than every earlier term of the key."""
        return self.token

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    @property
    def value(self) -> str:
        """The proclaimed value: the owner without its last ``/``-part."""
        return core.proclaimed(self.owner)

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def resign(self) -> bool:
        """Ends the leadership (LOCK.RELEASE): the next candidate leads in the same step.
        As ``release()``: True when released, False when it was no longer held."""
        return self.release()

    # generated from aio.py by scripts/gen_sync.py: edit it there, then run the script
    def downgrade(self) -> None:
        raise InvalidArgument("a leadership is an exclusive hold: it is never downgraded")
