"""The sync client against real servers: the behaviour cases of relock-client."""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import time
from typing import Callable, TypeVar

import pytest
import redis

import relock
from relock import _core as core
from servers import Server, SlowProxy, eventually

T = TypeVar("T")


def connect(server: Server, protocol: str = "3", **kw: object) -> redis.Redis:
    return redis.Redis.from_url(f"{server.url}?protocol={protocol}", decode_responses=True, **kw)


def info_field(r: redis.Redis, field: str) -> int:
    return int(r.info("relock")["relock_" + field])


def test_acquire_release_and_owner(server: Server, protocol: str) -> None:
    r = connect(server, protocol)
    locks = relock.Relock(r)
    with locks.lock("orders:1") as hold:
        assert hold.token > 0
        info = locks.info("orders:1")
        assert info is not None and info.owner == hold.owner and info.token == hold.token
        host, pid, rand = hold.owner.rsplit("/", 2)
        assert pid == str(os.getpid()) and len(rand) == 32 and host
        assert not hold.lost.is_set()
        hold.check()
    assert locks.info("orders:1") is None
    assert not hold.release()  # released before


def test_owner_prefix(server: Server) -> None:
    r = connect(server)
    with relock.Relock(r, owner_prefix="billing").lock("k") as h:
        assert h.owner.startswith("billing/") and len(h.owner) == len("billing/") + 32
    with relock.Relock(r, owner_prefix="").lock("k") as h:
        assert "/" not in h.owner and len(h.owner) == 32
    long = relock.Relock(r, owner_prefix="x" * 500).new_owner()
    assert len(long.encode()) == 256 and long.endswith(long[-32:])


def test_threads_sharing_a_client_exclude_each_other(server: Server) -> None:
    locks = relock.Relock(connect(server))
    h = locks.acquire("k", wait=0)
    assert h is not None
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(locks.acquire("k", wait=0)))
    t.start()
    t.join()
    assert got == [None]
    with pytest.raises(relock.NotAcquired) as e:
        with locks.lock("k", wait=0.2):
            pass
    assert e.value.retryable and "held by another owner" in str(e.value)
    assert h.release()


def test_wait_is_fifo_and_handed_over(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    first = locks.acquire("q", ttl=10)
    assert first is not None
    order: list[tuple[str, int]] = []

    def worker(name: str) -> None:
        with locks.lock("q", ttl=10, wait=30) as h:
            order.append((name, h.token))

    threads = []
    for i, name in enumerate(["w1", "w2", "w3"]):
        t = threading.Thread(target=worker, args=(name,))
        t.start()
        threads.append(t)
        assert eventually(lambda: (locks.info("q") or relock.LockInfo("", None, None, None, 0, 0, "", 0, 0)).waiters == i + 1)
    started = time.monotonic()
    first.release()
    for t in threads:
        t.join(30)
    assert [n for n, _ in order] == ["w1", "w2", "w3"]
    tokens = [first.token] + [t for _, t in order]
    assert tokens == sorted(tokens) and len(set(tokens)) == 4
    assert time.monotonic() - started < 10
    assert info_field(r, "granted_total") == 3


def test_renewal_keeps_a_hold_past_its_ttl(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    # A ttl of 1.2 s: a renewal every 0.4 s, and a thread that a busy machine leaves unscheduled
    # for most of a second does not lose the hold.
    with locks.lock("job", ttl=1.2) as h:
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            h.check()
            time.sleep(0.05)
        info = locks.info("job")
        assert info is not None and info.token == h.token
        assert info_field(r, "renewed_total") >= 2
    renewed = info_field(r, "renewed_total")
    time.sleep(0.5)
    assert info_field(r, "renewed_total") == renewed, "renewal stopped at release"


def test_manual_renew_changes_the_ttl(server: Server) -> None:
    locks = relock.Relock(connect(server))
    with locks.lock("k", ttl=5) as h:
        h.renew(60)
        info = locks.info("k")
        assert info is not None and info.ttl > 50 and h.ttl == 60


def test_loss_is_signalled_with_a_reason_within_validity(server: Server, protocol: str) -> None:
    r = connect(server, protocol)
    locks = relock.Relock(r)
    with locks.lock("k", ttl=1.5) as h:
        broken_at = time.monotonic()
        assert r.execute_command("LOCK.FORCERELEASE", "k") == 1
        assert h.lost.wait(10)
        assert time.monotonic() < max(h.valid_until, broken_at + 1.5)
        assert h.reason is not None and "LOCK.RENEW answered nil" in h.reason
        # The module keeps LOCK.HISTORY: the reason is the server's, not a guess.
        assert h.cause == "forcereleased", h.reason
        assert "LOCK.FORCERELEASE" in h.reason and "cannot say why" not in h.reason
        # Who broke it: the journal names the connection that sent LOCK.FORCERELEASE.
        entry = core.as_map(r.execute_command("LOCK.HISTORY", "k", 1)[0])
        assert core.text(entry.get("owner")) == h.owner
        assert f"id={r.client_id()} " in (core.text(entry.get("client-info")) or "")
        with pytest.raises(relock.LockLost) as e:
            h.check()
        assert not e.value.retryable and e.value.reason == h.reason
    assert locks.info("k") is None


def test_expiry_while_the_process_is_stalled(server: Server) -> None:
    """Work that holds the GIL longer than the ttl: the renewal thread cannot run, and the
    hold reads as lost the moment the work ends, before any thread got to run."""
    import ctypes

    locks = relock.Relock(connect(server))
    with locks.lock("k", ttl=0.3) as h:
        ctypes.PyDLL(None).usleep(600_000)  # holds the GIL for 0.6 s
        assert h.lost.is_set()
        with pytest.raises(relock.LockLost, match="stall"):
            h.check()


def test_shared_holds_and_writers(server: Server, protocol: str) -> None:
    locks = relock.Relock(connect(server, protocol))
    with locks.lock("cat", shared=True) as a, locks.lock("cat", shared=True) as b:
        assert a.token != b.token and a.shared
        info = locks.info("cat")
        assert info is not None and info.mode == "shared" and info.holders == 2 and info.limit == 0
        assert [h.owner for h in locks.holders("cat")] == [a.owner, b.owner]
        assert locks.acquire("cat", wait=0) is None  # a writer waits
    with locks.lock("cat") as w:
        assert w.token > b.token


def test_semaphore(server: Server) -> None:
    locks = relock.Relock(connect(server))
    p1 = locks.acquire("enc", limit=2)
    p2 = locks.acquire("enc", limit=2)
    assert p1 and p2
    assert locks.acquire("enc", limit=2, wait=0) is None
    with pytest.raises(relock.OtherLimit) as e:
        locks.acquire("enc", limit=3, wait=0)
    assert e.value.limit == 2 and not e.value.retryable and e.value.servers == [locks.servers[0]]
    released = threading.Timer(0.2, p1.release)
    released.start()
    with locks.lock("enc", limit=2, wait=10) as p3:
        assert p3.token > p2.token
    p2.release()


def test_reentry_is_explicit(server: Server) -> None:
    locks = relock.Relock(connect(server))
    with locks.lock("k") as h:
        with h.reenter() as count:
            assert count == 2
            info = locks.info("k")
            assert info is not None and info.count == 2
        info = locks.info("k")
        assert info is not None and info.count == 1
    assert locks.info("k") is None


def test_errors_name_the_server_and_say_whether_to_retry(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    with pytest.raises(relock.InvalidArgument):
        locks.acquire("k", ttl=0)
    with pytest.raises(relock.InvalidArgument):
        locks.acquire("k", limit=0)
    r.set("str", "x")
    with pytest.raises(relock.ServerError) as e:
        locks.acquire("str")
    assert not e.value.retryable and e.value.servers == locks.servers and "WRONGTYPE" in str(e.value)
    plain = Server(module=False)
    try:
        with pytest.raises(relock.ServerError) as e:
            relock.Relock(connect(plain)).acquire("k")
        assert not e.value.retryable and "module loaded" in str(e.value)
        assert e.value.servers == [f"127.0.0.1:{plain.port}"]
    finally:
        plain.close()


def test_waiters_of_a_key_nobody_waits_for(server: Server) -> None:
    # The module has LOCK.WAITERS: an empty queue (also for a missing key), not an error.
    assert relock.Relock(connect(server)).waiters("k") == []


def test_limit_is_refused_over_independent_masters(servers3: list[Server]) -> None:
    locks = relock.Relock([connect(s) for s in servers3])
    with pytest.raises(relock.InvalidArgument, match=r"\{A,B\}"):
        locks.acquire("k", limit=2)
    with locks.lock("k", shared=True) as h:  # a read lock over a quorum is sound
        assert len(h.tokens) >= 2


def test_redlock_with_a_paused_master(servers3: list[Server]) -> None:
    locks = relock.Relock([connect(s, socket_timeout=5) for s in servers3])
    assert locks.quorum == 2
    servers3[2].pause()
    try:
        started = time.monotonic()
        with locks.lock("rl", ttl=1.0) as h:
            assert time.monotonic() - started < 5
            assert set(h.tokens) <= set(locks.servers[:2]) and len(h.tokens) == 2
            end = time.monotonic() + 2.5
            while time.monotonic() < end:
                h.check()  # renewed by the two that answer
                time.sleep(0.05)
            # A second master stops: no quorum can renew, and the loss comes in time.
            servers3[1].pause()
            assert h.lost.wait(5)
            assert time.monotonic() <= h.valid_until + 0.05
    finally:
        for s in servers3:
            s.resume()


def within(seconds: float, fn: Callable[[], T]) -> T:
    """``fn()``, failing the test (instead of hanging it) if it takes longer than ``seconds``:
    it runs on a daemon thread, left behind if it never returns."""
    future: cf.Future[T] = cf.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            future.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    try:
        return future.result(timeout=seconds)
    except cf.TimeoutError:
        pytest.fail(f"still running after {seconds} s")


def test_a_paused_master_costs_a_round_its_deadline_and_no_more(servers3: list[Server]) -> None:
    """Clients without a socket_timeout (redis-py's default): a stopped master still accepts
    connections (its kernel does) but never answers the handshake. Each round gives it
    node_timeout, connecting included, and no thread of the client stays stuck on it, so
    round after round the two others carry on."""
    locks = relock.Relock([connect(s) for s in servers3])

    def connected() -> bool:  # a connection open to every master (a loaded machine may take a while)
        try:
            return locks.info_each("warm") == [None] * 3
        except relock.ServerError:
            return False

    assert eventually(connected)
    servers3[2].pause()
    try:
        granted = 0
        for i in range(30):  # more rounds than the client has threads (24)
            started = time.monotonic()
            h = within(10, lambda: locks.acquire(f"k{i}", ttl=5, wait=0))
            if h is not None:
                granted += 1
                assert set(h.tokens) == set(locks.servers[:2]), i
                assert within(10, h.release)
            # A release waits for every master: the paused one costs it node_timeout.
            assert time.monotonic() - started < 2.0, (i, time.monotonic() - started)
        # Each round needs both others within 0.1 s, which a loaded machine sometimes misses;
        # a client with threads stuck on the paused master would grant none after round 13.
        assert granted >= 20, granted
        opening = [t for t in threading.enumerate() if t.name == f"relock connect {locks.servers[2]}"]
        assert len(opening) <= 4, "a paused master holds at most four threads, opening connections"
    finally:
        servers3[2].resume()


def test_a_paused_server_costs_a_call_its_deadline(server: Server) -> None:
    locks = relock.Relock(connect(server))  # no socket_timeout
    assert locks.info("k") is None  # a connection is open
    server.pause()
    try:
        for _ in range(3):  # the first on the open connection, the others on new ones
            started = time.monotonic()
            assert within(10, lambda: locks.acquire("k", wait=0)) is None
            assert time.monotonic() - started < 1.0
        started = time.monotonic()
        with pytest.raises(relock.ServerError) as e:
            within(10, lambda: locks.info("k"))
        assert e.value.retryable and e.value.servers == locks.servers
        assert time.monotonic() - started < 2.5  # info() allows a server 1 s
    finally:
        server.resume()
    # It serves again once the server is back. (Not "k" yet: the server still executes the
    # requests that reached it while it was stopped, and those late grants last their ttl.)
    with locks.lock("k2", wait=0) as h:
        assert h.token > 0


def test_a_server_slow_to_connect_to_serves_the_next_calls(server: Server) -> None:
    """Connecting takes 0.3 s (each new connection), a command 0.1 ms, the node timeout is
    0.1 s. The first connection of a one-server client may take up to 2 s (a process starting
    up does not know yet how far its server is). Later ones count against each call's
    deadline: a call gives up while a connection opens in the background, and the next calls
    use it. (Opening a connection within each call's deadline would never succeed.)"""
    proxy = SlowProxy(server.port, 0.3)
    try:
        locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=0.1)
        started = time.monotonic()
        with locks.lock("k", ttl=5, wait=0) as h:
            assert h.token > 0 and time.monotonic() - started < 2.0
        connect(server).execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        started = time.monotonic()
        assert locks.acquire("k", wait=0) is None  # gave up while connecting
        assert time.monotonic() - started < 1.0
        with locks.lock("k", ttl=5, wait=5) as h:  # tries again; a connection is open by then
            assert time.monotonic() - started < 5
        started = time.monotonic()
        with locks.lock("k", wait=0):  # on the open connection: quick
            assert time.monotonic() - started < 0.5
    finally:
        proxy.close()


def test_a_server_stopped_before_the_first_call(server: Server) -> None:
    """No connection was ever opened: a one-server client waits 2 s for one, not forever."""
    locks = relock.Relock(connect(server))
    server.pause()
    try:
        for _ in range(2):
            started = time.monotonic()
            assert within(10, lambda: locks.acquire("k", wait=0)) is None
            assert time.monotonic() - started < 4.0
    finally:
        server.resume()


def test_a_wait_without_limit_queues_once(server: Server) -> None:
    """wait=None is one LOCK.WAIT without a timeout, first in first out, not a series of short
    ones (each would leave the queue and join it again at its end)."""
    r = connect(server)
    locks = relock.Relock(r)
    first = locks.acquire("q", ttl=10, wait=0)
    assert first is not None
    got: list[relock.Hold | None] = []
    waiter = threading.Thread(target=lambda: got.append(locks.acquire("q", ttl=10)))
    waiter.start()
    assert eventually(lambda: info_field(r, "waiters") == 1)
    time.sleep(1.0)  # ten node timeouts
    assert info_field(r, "contended_total") == 1, "queued once"
    first.release()
    waiter.join(10)
    assert got and got[0] is not None and got[0].token > first.token
    assert info_field(r, "granted_total") == 1
    got[0].release()


def test_redlock_wait_hands_over(servers3: list[Server]) -> None:
    locks = relock.Relock([connect(s) for s in servers3])
    first = locks.acquire("rl", ttl=10, wait=0)
    assert first is not None and len(first.tokens) >= 2
    threading.Timer(0.3, first.release).start()
    with locks.lock("rl", ttl=10, wait=10) as h:
        assert all(h.tokens[s] > first.tokens[s] for s in h.tokens if s in first.tokens)


def test_connection_dropped_mid_renewal(server: Server) -> None:
    """Every connection is dropped every 250 ms for 3 s; the 1.2 s hold is renewed across the
    drops (each renewal that finds its connection closed opens another)."""
    r = connect(server)
    admin = connect(server)
    locks = relock.Relock(r)
    with locks.lock("k", ttl=1.2) as h:
        first = h.valid_until
        for _ in range(12):
            admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            time.sleep(0.25)
        h.check()  # reconnected and renewed
        assert h.valid_until > first + 1.5, "renewed across the drops"
        info = locks.info("k")
        assert info is not None and info.owner == h.owner


def test_a_stopped_server_ends_the_hold_within_validity(server: Server) -> None:
    locks = relock.Relock(connect(server))
    h = locks.acquire("k", ttl=0.9)
    assert h is not None
    server.pause()
    try:
        assert h.lost.wait(10)
        assert time.monotonic() <= h.valid_until + 0.05
        assert h.reason and "validity ran out" in h.reason
    finally:
        server.resume()


def test_fork_after_acquire(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    with locks.lock("k", ttl=1.0) as h:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the hold is the parent's, never renewed or released here
            ok = h.lost.is_set() and not h.release()
            try:
                h.check()
                ok = False
            except relock.LockLost as e:
                ok = ok and "forked" in str(e)
            os.write(write, b"ok" if ok else b"no")
            os._exit(0)
        os.close(write)
        assert os.read(read, 2) == b"ok"
        os.waitpid(pid, 0)
        time.sleep(1.2)  # longer than the ttl: the parent's renewal still runs
        h.check()
        info = locks.info("k")
        assert info is not None and info.owner == h.owner


def test_process_exit_releases_what_it_holds(server: Server) -> None:
    import subprocess
    import sys

    code = (
        "import redis, relock\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "h = locks.acquire('exit', ttl=60)\n"
        "print(h.token, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert relock.Relock(connect(server)).info("exit") is None
