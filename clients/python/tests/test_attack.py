"""Attacks on the Python package: each test says what it attacks and what must hold. They are
regression tests: some attacks found a break in the package (fixed since), the others are
attacks the package held, kept as cheap checks."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import relock
import relock.aio
from servers import Server, eventually


def connect(server: Server, protocol: str = "3", **kw: Any) -> redis.Redis:
    return redis.Redis.from_url(f"{server.url}?protocol={protocol}", decode_responses=True, **kw)


def aconnect(server: Server, protocol: str = "3") -> aredis.Redis:
    return aredis.Redis.from_url(f"{server.url}?protocol={protocol}", decode_responses=True)


def run_python(code: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    """``code`` in a fresh interpreter with the package; None when it is still running after
    ``timeout`` seconds (it is killed then)."""
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def holding(servers: list[Server], key: str) -> list[bool]:
    """Per server, whether it has a hold of ``key`` (LOCK.INFO)."""
    return [connect(s).execute_command("LOCK.INFO", key) is not None for s in servers]


# --- ttl extremes --------------------------------------------------------------------------


def test_a_ttl_too_short_to_ever_hold_is_refused_not_retried_forever(server: Server) -> None:
    """Attack: ttl=0.001 s (the documented minimum, "1 ms to 10^9 s"). The drift alone (1 % +
    2 ms) is longer than the ttl, so no acquisition can leave any validity. Must hold: the call
    ends (InvalidArgument, or at least a non-retryable error), never an endless acquire/release
    loop; sync and asyncio alike."""
    code = (
        "import asyncio, redis, redis.asyncio as aredis, relock, relock.aio\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "try:\n"
        "    locks.acquire('tiny', ttl=0.001, wait=0)\n"
        "    print('wait0: returned')\n"
        "except relock.RelockError as e:\n"
        "    print('wait0:', type(e).__name__, e.retryable)\n"
        "try:\n"
        "    locks.acquire('tiny', ttl=0.001)\n"
        "except relock.RelockError as e:\n"
        "    print('sync:', type(e).__name__)\n"
        "async def main():\n"
        f"    al = relock.aio.Relock(aredis.Redis(port={server.port}))\n"
        "    try:\n"
        "        await al.acquire('tiny', ttl=0.001)\n"
        "    except relock.RelockError as e:\n"
        "        print('aio:', type(e).__name__)\n"
        "asyncio.run(main())\n"
    )
    out = run_python(code, 5)
    assert out is not None, "acquire(ttl=0.001) with wait=None never returned (an endless acquire/release loop)"
    assert "wait0: InvalidArgument False" in out.stdout, out.stdout + out.stderr


def test_ttl_and_wait_out_of_range_are_usage_errors(server: Server) -> None:
    """Attack: ttl 0, negative, NaN, inf, over 10^9 s; wait negative or NaN. Must hold: an
    InvalidArgument (not retryable, also a ValueError) before any server is asked."""
    locks = relock.Relock(connect(server))
    for ttl in (0, -1, float("nan"), float("inf"), 1e9 + 1, 0.0009):
        with pytest.raises(relock.InvalidArgument) as e:
            locks.acquire("k", ttl=ttl, wait=0)
        assert not e.value.retryable and isinstance(e.value, ValueError)
    for wait in (-1, -0.001, float("nan")):
        with pytest.raises(relock.InvalidArgument):
            locks.acquire("k", ttl=1, wait=wait)
    assert connect(server).execute_command("LOCK.INFO", "k") is None


def test_a_huge_ttl_and_a_huge_key_work(server: Server) -> None:
    """Attack: the largest ttl (10^9 s), a 1 MB key, a 10 kB owner prefix. Must hold: granted,
    renewable, released."""
    locks = relock.Relock(connect(server), owner_prefix="p" * 10_000)
    key = "k" * 1_000_000
    with locks.lock(key, ttl=1e9, wait=0) as h:
        h.renew()
        assert len(h.owner.encode()) <= 256
        info = locks.info(key)
        assert info is not None and info.owner == h.owner
    assert locks.info(key) is None


# --- process exit ----------------------------------------------------------------------------


def test_redlock_holds_are_released_at_interpreter_exit(servers3: list[Server]) -> None:
    """Attack: a Redlock client's process ends normally with a hold still held (docs: "released
    at interpreter exit (atexit)"). Must hold: no master keeps it after the process is gone."""
    ports = [s.port for s in servers3]
    code = (
        "import redis, relock\n"
        f"locks = relock.Relock([redis.Redis(port=p) for p in {ports}])\n"
        "h = locks.acquire('rl-exit', ttl=60)\n"
        "print(h.token, flush=True)\n"
    )
    out = run_python(code, 60)
    assert out is not None and out.returncode == 0, out
    assert holding(servers3, "rl-exit") == [False] * 3


def test_one_server_holds_are_released_at_exit_even_on_an_uncaught_exception(server: Server) -> None:
    """Attack: a process (one server) dies of an uncaught exception, and another one calls
    sys.exit, each with a hold. Must hold: released at exit."""
    for ending in ("raise RuntimeError('boom')", "import sys; sys.exit(3)"):
        code = (
            "import redis, relock\n"
            f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
            "h = locks.acquire('exit', ttl=60)\n"
            f"{ending}\n"
        )
        out = run_python(code, 60)
        assert out is not None and out.returncode != 0
        assert holding([server], "exit") == [False], ending


def test_a_killed_process_keeps_its_lock_no_longer_than_the_ttl(server: Server) -> None:
    """Attack: SIGTERM (no handler) and os._exit with a hold of ttl 1 s. Must hold: nothing
    renews it afterwards; it is free within the ttl (plus slack)."""
    code = (
        "import os, sys, time, redis, relock\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "h = locks.acquire(sys.argv[1], ttl=1)\n"
        "print('held', flush=True)\n"
        "if sys.argv[1] == 'exit': os._exit(0)\n"
        "time.sleep(60)\n"
    )
    for how in ("term", "exit"):
        p = subprocess.Popen([sys.executable, "-c", code, how], stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout is not None and p.stdout.readline().strip() == "held"
            if how == "term":
                p.send_signal(signal.SIGTERM)
            p.wait(20)
            gone = time.monotonic()
            assert eventually(lambda: holding([server], how) == [False], 5)
            assert time.monotonic() - gone < 2.0
        finally:
            p.kill()
            p.wait()


def test_a_worker_thread_keeps_its_hold_after_the_main_thread_returns(server: Server) -> None:
    """Attack: the main thread starts a (non-daemon) worker and returns; the worker holds a
    0.6 s lock for 2 s. Must hold: the hold is renewed the whole time (the process is alive,
    the server healthy)."""
    code = (
        "import threading, time, redis, relock\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "def work():\n"
        "    with locks.lock('worker', ttl=0.6) as h:\n"
        "        print('lost' if h.lost.wait(2.0) else 'kept', h.reason, flush=True)\n"
        "threading.Thread(target=work).start()\n"
        "time.sleep(0.1)\n"
    )
    out = run_python(code, 60)
    assert out is not None and out.returncode == 0, out
    assert out.stdout.startswith("kept"), out.stdout


def test_an_interrupted_redlock_wait_exits_and_leaves_no_waiter(servers3: list[Server]) -> None:
    """Attack: a process waits without limit for a Redlock key that is held, and gets SIGTERM
    (its handler calls sys.exit, as services do). Must hold: it exits promptly, and its waits
    leave the masters' queues (nobody is granted the lock for a dead waiter)."""
    locks = relock.Relock([connect(s) for s in servers3])
    holder = locks.acquire("rl-wait", ttl=30)
    assert holder is not None
    code = (
        "import signal, sys, redis, relock\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\n"
        f"locks = relock.Relock([redis.Redis(port=s) for s in {[s.port for s in servers3]}])\n"
        "print('waiting', flush=True)\n"
        "with locks.lock('rl-wait', ttl=30):\n"
        "    print('granted', flush=True)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "waiting"
        queued = lambda: sum(bool(connect(s).execute_command("LOCK.WAITERS", "rl-wait")) for s in servers3)  # noqa: E731
        assert eventually(lambda: queued() >= 2, 10)
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
            exited = True
        except subprocess.TimeoutExpired:
            exited = False
        holder.release()
        time.sleep(0.3)
        assert exited, "still running 5 s after SIGTERM (its executor threads block in LOCK.WAIT)"
        assert holding(servers3, "rl-wait") == [False] * 3
    finally:
        p.kill()
        p.wait()


# --- fork ----------------------------------------------------------------------------------


def test_a_child_forked_mid_renewal_can_use_the_client(server: Server) -> None:
    """Attack: fork at the instant a relock background thread (renewal, connection opener)
    holds the per-server connection lock, as it does for every checkout; that instant is hit
    about 1 fork in 40 with 20 holds of ttl 30 ms, and is pinned here by holding that lock from
    a thread across the fork. Must hold: the child can take a lock of its own (the parent's
    holds are not its own; its client state is reset at fork)."""
    locks = relock.Relock(connect(server))
    with locks.lock("parent", ttl=5) as h:
        inner = locks._servers[0]._cond
        taken, done = threading.Event(), threading.Event()

        def busy() -> None:
            with inner:
                taken.set()
                done.wait(5)

        threading.Thread(target=busy, daemon=True).start()
        assert taken.wait(5)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            signal.alarm(3)
            try:
                c = locks.acquire("child", ttl=1, wait=0)
                os._exit(0 if c is not None and c.release() else 1)
            except BaseException:  # noqa: BLE001
                os._exit(2)
        done.set()
        _, status = os.waitpid(pid, 0)
        h.check()
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status} (SIGALRM: hung)"


def test_a_forked_child_that_exits_leaves_the_parents_hold_alone(server: Server) -> None:
    """Attack: fork inside ``with locks.lock(...)``; the child takes a lock of its own, leaves
    the ``with`` block (its exit releases) and ends with sys.exit (atexit runs in the child).
    Must hold: the child neither releases nor renews the parent's hold; the parent keeps it and
    renews it past its ttl."""
    code = (
        "import os, sys, time, redis, relock\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "with locks.lock('k', ttl=0.6) as h:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        with locks.lock('child', ttl=1, wait=0):\n"
        "            pass\n"
        "    else:\n"
        "        os.waitpid(pid, 0)\n"
        "        time.sleep(1.0)\n"
        "        h.check()\n"
        "        print('parent kept', locks.info('k').owner == h.owner, flush=True)\n"
        "if pid == 0:\n"
        "    sys.exit(0)\n"
        "print('released', locks.info('k') is None, flush=True)\n"
    )
    out = run_python(code, 60)
    assert out is not None and out.returncode == 0, out
    assert out.stdout.split() == ["parent", "kept", "True", "released", "True"], out.stdout + out.stderr


# --- thread pool -----------------------------------------------------------------------------


def test_redlock_waiting_threads_do_not_starve_the_holder(servers3: list[Server]) -> None:
    """Attack: one Relock over 3 healthy masters shared by threads: one holds a key (ttl 1.5 s),
    12 others wait for it (wait=4). Must hold: the holder is renewed (not lost) and its release
    succeeds; then the waiters get the lock in turn."""
    locks = relock.Relock([connect(s) for s in servers3])
    h = locks.acquire("s", ttl=1.5, wait=5)
    assert h is not None
    got: list[object] = []

    def waiter() -> None:
        try:
            g = locks.acquire("s", ttl=1.5, wait=4)
            got.append(g)
            if g is not None:
                g.release()
        except relock.RelockError as e:
            got.append(e)

    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(12)]
    for t in threads:
        t.start()
    lost = h.lost.wait(2.5)
    released = h.release()
    for t in threads:
        t.join(20)
    assert not lost, h.reason
    assert released
    assert all(isinstance(g, relock.Hold) for g in got), got


# --- Redlock ---------------------------------------------------------------------------------


def test_a_waited_redlock_hold_survives_one_paused_master(servers3: list[Server]) -> None:
    """Attack: holds taken with ``wait`` over 3 healthy masters (uncontended), then one master
    holding one of them stops (SIGSTOP). Must hold (docs: "a paused Redlock master: the other
    two carry acquisitions and renewals"): the hold is renewed by the other two."""
    locks = relock.Relock([connect(s) for s in servers3])
    holds = [locks.acquire(f"w{i}", ttl=1.2, wait=2) for i in range(30)]
    time.sleep(0.2)
    # A hold that a master did not keep: the client cut its wait there once two had granted.
    bare = next((h for h in holds if h is not None and sum(holding(servers3, h.key)) < 3), None)
    for other in holds:
        if other is not None and other is not bare:
            other.release()
    if bare is None:
        return  # every hold is on all three masters: one stopping cannot end any
    stop = next(s for s, held in zip(servers3, holding(servers3, bare.key)) if held)
    stop.pause()
    try:
        lost = bare.lost.wait(2.0)
    finally:
        stop.resume()
    assert not lost, f"one paused master ended {bare!r}: {bare.reason}"


def test_redlock_fencing_token_grows_from_one_holder_to_the_next(servers3: list[Server]) -> None:
    """Attack: fencing with ``hold.token`` (docs: "store.write(data, fence=hold.token)") over
    masters 0, 1, 2. A holds 1 and 2; C queues on 1 and 2; B (the package) asks all three:
    master 0 grants B at once (its token minted now), B queues on 1 and 2 behind C. A releases:
    C holds 1 and 2 (a quorum) with newer tokens, works, releases; B then gets 1 and 2 within its
    partial hold and is the next holder. Must hold: B's ``hold.token`` is larger than every
    token C fenced with (else a store that saw C refuses B, and a late write of C passes after
    B's). The same happens under plain contention (16 tasks, 3 healthy masters: backwards in 4
    of 6 runs); ``max(hold.tokens.values())`` never went backwards."""
    raw = [connect(s) for s in servers3]
    for i in (1, 2):
        assert raw[i].execute_command("LOCK.ACQUIRE", "f", "A", 10_000) is not None
    c_tokens: list[int] = []

    def c_waits(i: int) -> None:
        c_tokens.append(int(connect(servers3[i]).execute_command("LOCK.WAIT", "f", "C", 10_000, 10_000)))

    cs = [threading.Thread(target=c_waits, args=(i,)) for i in (1, 2)]
    for t in cs:
        t.start()

    def queued(n: int) -> bool:
        return all(len(raw[i].execute_command("LOCK.WAITERS", "f")) == n for i in (1, 2))

    assert eventually(lambda: queued(1), 5)
    locks = relock.Relock([connect(s) for s in servers3], max_partial_hold=2.0)
    assert eventually(lambda: locks.info_each("warm") == [None] * 3, 5)
    got: list[relock.Hold | None] = []
    b = threading.Thread(target=lambda: got.append(locks.acquire("f", ttl=10, wait=8)))
    b.start()
    assert eventually(lambda: queued(2), 5)
    for i in (1, 2):
        raw[i].execute_command("LOCK.RELEASE", "f", "A")
    for t in cs:
        t.join(5)
    # C releases master 2 first: B's next grant is then minted where C's newest token was.
    # (Released on master 1 first, B could win on 0 and 1 within the millisecond C was granted
    # on 2, and tokens of separate masters minted in one millisecond are equal: the wall-clock
    # floor orders tokens across masters only from one millisecond to the next, which no
    # client can change.)
    for i in (2, 1):
        raw[i].execute_command("LOCK.RELEASE", "f", "C")
    b.join(10)
    hold = got[0]
    assert hold is not None and len(c_tokens) == 2
    hold.release()
    assert hold.token > max(c_tokens), f"B's hold.token {hold.token} < C's tokens {c_tokens} (B's tokens {hold.tokens})"


def test_redlock_single_paused_master_before_acquire_keeps_the_hold(servers3: list[Server]) -> None:
    """Attack: one master stopped before a waited acquisition. Must hold: granted by the two
    others, renewed by them past the ttl."""
    locks = relock.Relock([connect(s) for s in servers3])
    servers3[1].pause()
    try:
        with locks.lock("p", ttl=0.9, wait=5) as h:
            assert not h.lost.wait(1.5), h.reason
            h.check()
    finally:
        servers3[1].resume()


# --- errors ----------------------------------------------------------------------------------


def test_a_refused_renewal_ttl_is_an_error_and_keeps_the_hold() -> None:
    """Attack: a server with relock.restart-grace-ms 1000 (after the grace) and a valid hold;
    ``hold.renew(5)`` asks for a ttl the server refuses (ERR ttl_ms exceeds
    relock.restart-grace-ms). Must hold (docs: "a ServerError that is not retryable"): that
    error, and the hold stays held and renewed."""
    s = Server("--relock.restart-grace-ms", "1000")
    try:
        locks = relock.Relock(connect(s))
        h = None
        end = time.monotonic() + 10
        while h is None and time.monotonic() < end:
            h = locks.acquire("g", ttl=0.9, wait=0)
            time.sleep(0.05)
        assert h is not None
        with pytest.raises(relock.RelockError) as e:
            h.renew(5)
        assert type(e.value) is relock.ServerError and not e.value.retryable, repr(e.value)
        assert not h.lost.is_set()
        info = locks.info("g")
        assert info is not None and info.owner == h.owner
    finally:
        s.close()


def test_a_release_the_server_refuses_is_not_reported_as_not_held(server: Server) -> None:
    """Attack: an ACL user without LOCK.RELEASE. Must hold: ``release()`` does not say the hold
    was no longer held (False) while the server still holds it: it raises a ServerError that
    names the server and is not retryable."""
    connect(server).execute_command("ACL", "SETUSER", "norelease", "on", ">pw", "~*", "+@all", "-lock.release")
    locks = relock.Relock(connect(server, username="norelease", password="pw"))
    h = locks.acquire("r", ttl=5)
    assert h is not None
    try:
        result: object = h.release()
    except relock.ServerError as e:
        result = e
    assert holding([server], "r") == [True]
    assert isinstance(result, relock.ServerError), f"release() returned {result!r} with the lock still held"


def test_a_user_without_lock_renew_loses_the_hold_at_once_and_says_why(server: Server, protocol: str) -> None:
    """Attack: an ACL user that may acquire but not LOCK.RENEW. Must hold: the hold is reported
    lost at its first renewal, within validity, with NOPERM and the server named, not
    retryable."""
    connect(server).execute_command("ACL", "SETUSER", "norenew", "on", ">pw", "~*", "+@all", "-lock.renew")
    locks = relock.Relock(connect(server, protocol, username="norenew", password="pw"))
    h = locks.acquire("n", ttl=0.9)
    assert h is not None
    assert h.lost.wait(5)
    assert time.monotonic() <= h.valid_until + 0.05
    with pytest.raises(relock.LockLost) as e:
        h.check()
    assert "LOCK.RENEW" in str(e.value) and locks.servers[0] in str(e.value) and not e.value.retryable


def test_a_server_without_the_module_is_named_and_not_retryable() -> None:
    """Attack: every kind of call against a server without the module. Must hold: a
    ServerError naming the server, saying the module may be missing, not retryable; no
    hang, for every wait."""
    s = Server(module=False)
    try:
        for locks in (relock.Relock(connect(s)),):
            for wait in (0, None, 1):
                with pytest.raises(relock.ServerError) as e:
                    locks.acquire("k", wait=wait)
                assert not e.value.retryable and e.value.servers == locks.servers
                assert "module loaded" in str(e.value)

        async def main() -> None:
            al = relock.aio.Relock(aconnect(s))
            for wait in (0, None, 1):
                with pytest.raises(relock.ServerError) as e:
                    await al.acquire("k", wait=wait)
                assert not e.value.retryable and "module loaded" in str(e.value)

        asyncio.run(main())
    finally:
        s.close()


# --- connections and restarts -------------------------------------------------------------


def test_a_server_restart_ends_the_hold_within_validity(server: Server) -> None:
    """Attack: the server restarts (empty) under a 1.5 s hold, sync and asyncio. Must hold: the
    loss is signalled within validity, with the server's refusal as the reason."""
    locks = relock.Relock(connect(server))
    h = locks.acquire("k", ttl=1.5)
    assert h is not None
    port = server.port
    server.kill()
    server.start(port)
    assert h.lost.wait(5)
    assert time.monotonic() <= h.valid_until + 0.05
    assert h.reason and "LOCK.RENEW answered nil" in h.reason

    async def main() -> None:
        al = relock.aio.Relock(aconnect(server))
        ah = await al.acquire("a", ttl=1.5)
        assert ah is not None
        server.kill()
        server.start(port)
        await asyncio.wait_for(ah.lost.wait(), 5)
        assert time.monotonic() <= ah.valid_until + 0.05
        await al.settle()

    asyncio.run(main())


def test_aio_connection_dropped_mid_renewal(server: Server) -> None:
    """Attack: every connection is killed every 250 ms for 3 s under a 1.2 s asyncio hold.
    Must hold: renewed across the drops, still the owner."""
    admin = connect(server)

    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        async with locks.lock("k", ttl=1.2) as h:
            first = h.valid_until
            for _ in range(12):
                admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                await asyncio.sleep(0.25)
            h.check()
            assert h.valid_until > first + 1.5
        await locks.settle()

    asyncio.run(main())


# --- cancellation ----------------------------------------------------------------------------


def test_aio_cancelled_wait_leaves_no_waiter(server: Server) -> None:
    """Attack: an asyncio task waiting (no limit) for a held key is cancelled. Must hold: its
    wait leaves the queue; once the holder releases, the key is free."""

    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        holder = await locks.acquire("w", ttl=5)
        assert holder is not None
        t = asyncio.ensure_future(locks.acquire("w", ttl=5))
        admin = connect(server)
        assert await asyncio.to_thread(eventually, lambda: bool(admin.execute_command("LOCK.WAITERS", "w")), 5)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await holder.release()
        await locks.settle()
        assert await asyncio.to_thread(eventually, lambda: admin.execute_command("LOCK.WAITERS", "w") == [], 5)
        again = await locks.acquire("w", ttl=5, wait=0)
        assert again is not None
        await again.release()

    asyncio.run(main())


def test_aio_cancelled_redlock_wait_leaves_no_waiter(servers3: list[Server]) -> None:
    """Attack: the same over 3 masters (Redlock). Must hold: no master keeps the cancelled wait,
    and once the holder releases, the key is free."""

    async def main() -> None:
        locks = relock.aio.Relock([aconnect(s) for s in servers3])
        holder = await locks.acquire("w", ttl=5)
        assert holder is not None
        t = asyncio.ensure_future(locks.acquire("w", ttl=5))
        await asyncio.sleep(0.3)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await asyncio.sleep(0.3)
        await holder.release()
        await asyncio.sleep(0.3)
        again = await locks.acquire("w", ttl=5, wait=0)
        assert again is not None, f"held by a cancelled waiter: {holding(servers3, 'w')}"
        await again.release()

    asyncio.run(main())


def test_aio_cancelled_body_releases(server: Server) -> None:
    """Attack: a task holding a lock in ``async with`` is cancelled (wait_for timeout). Must
    hold: released on the way out."""

    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))

        async def body() -> None:
            async with locks.lock("c", ttl=5):
                await asyncio.sleep(10)

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(body(), 0.3)
        await locks.settle()
        assert holding([server], "c") == [False]

    asyncio.run(main())


# --- contention ------------------------------------------------------------------------------


def test_threads_sharing_a_client_never_overlap(server: Server, protocol: str) -> None:
    """Attack: 16 threads sharing one Relock, 5 turns each on one key (waits without limit).
    Must hold: never two inside at once; tokens increase in the order of entry."""
    locks = relock.Relock(connect(server, protocol))
    guard = threading.Lock()
    inside, overlaps, tokens, errors = [0], [0], [], []

    def worker() -> None:
        for _ in range(5):
            try:
                with locks.lock("m", ttl=2) as h:
                    with guard:
                        inside[0] += 1
                        overlaps[0] += inside[0] > 1
                        tokens.append(h.token)
                    time.sleep(0.001)
                    h.check()
                    with guard:
                        inside[0] -= 1
            except relock.RelockError as e:
                errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and overlaps[0] == 0 and len(tokens) == 80 and tokens == sorted(tokens)


def test_aio_tasks_never_overlap_single_and_redlock(servers3: list[Server]) -> None:
    """Attack: 16 asyncio tasks sharing one client, 5 turns each on one key, on one server and
    over 3 masters. Must hold: never two inside at once; the largest token of each hold
    increases."""

    async def run(locks: relock.aio.Relock) -> None:
        inside, overlaps, tokens = [0], [0], []

        async def worker() -> None:
            for _ in range(5):
                async with locks.lock("am", ttl=2, wait=20) as h:
                    inside[0] += 1
                    overlaps[0] += inside[0] > 1
                    tokens.append(max(h.tokens.values()))  # hold.token: see the fencing test
                    await asyncio.sleep(0.001)
                    h.check()
                    inside[0] -= 1

        await asyncio.gather(*[worker() for _ in range(16)])
        await locks.settle()
        assert overlaps[0] == 0 and len(tokens) == 80 and tokens == sorted(tokens)

    asyncio.run(run(relock.aio.Relock(aconnect(servers3[0]))))
    asyncio.run(run(relock.aio.Relock([aconnect(s) for s in servers3])))


# --- a blocked event loop --------------------------------------------------------------------


def test_aio_blocked_loop_wakes_lost_waiters_at_once(server: Server) -> None:
    """Attack: time.sleep (2x the ttl) inside ``async with``; a task waits on ``hold.lost``.
    Must hold: right after the block, ``lost`` reads set and the waiting task wakes before the
    body awaits anything long."""

    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        async with locks.lock("b", ttl=0.3) as h:
            waiter = asyncio.ensure_future(h.lost.wait())
            await asyncio.sleep(0)
            time.sleep(0.6)
            assert h.lost.is_set()
            await asyncio.wait_for(waiter, 0.2)
        await locks.settle()

    asyncio.run(main())
