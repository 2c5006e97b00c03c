"""The commands against real servers, sync and asyncio, RESP2 and RESP3: acquire and release,
owners, renew, shared holds, semaphores and permits, re-entry, downgrade, what the server
says (info, holders, waiters, history, log, stats), the restart grace, errors and refusals."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import threading

import pytest
import redis
import redis.asyncio as aredis

import relock
import relock.aio
from relock import _core as core
from helpers import aconnect, connect, eventually, holding, run_python, wait_out_ttl_async
from servers import Server


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_owner_prefix(server: Server) -> None:
    r = connect(server)
    with relock.Relock(r, owner_prefix="billing").lock("k") as h:
        assert h.owner.startswith("billing/") and len(h.owner) == len("billing/") + 32
    with relock.Relock(r, owner_prefix="").lock("k") as h:
        assert "/" not in h.owner and len(h.owner) == 32
    long = relock.Relock(r, owner_prefix="x" * 500).new_owner()
    assert len(long.encode()) == 256 and long.endswith(long[-32:])


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_manual_renew_changes_the_ttl(server: Server) -> None:
    locks = relock.Relock(connect(server))
    with locks.lock("k", ttl=5) as h:
        h.renew(60)
        info = locks.info("k")
        assert info is not None and info.ttl > 50 and h.ttl == 60


# A renewal the servers applied, answered after the hold was lost (its validity ran out and
# the give-back is under way), answered as a success and moved the validity on: the Go
# client's Mutex.Extend did that in the attack round of 2026-12-05, and the step here had the
# same shape. The loss is made to land during the round by wrapping the client's round.
def test_a_renewal_answered_after_the_loss_does_not_revive_the_hold(server: Server) -> None:
    locks = relock.Relock(connect(server))
    with locks.lock("k", ttl=30) as h:
        real = locks._round

        def round_then_lost(*args: object, **kwargs: object) -> object:
            rnd = real(*args, **kwargs)  # type: ignore[arg-type]
            h._lose("lost while the renewal ran (the test's)")
            return rnd

        locks._round = round_then_lost  # type: ignore[method-assign,assignment]
        try:
            with pytest.raises(relock.LockLost, match="lost while the renewal ran"):
                h.renew()
        finally:
            locks._round = real  # type: ignore[method-assign]
        assert h.lost.is_set()
        assert eventually(lambda: locks.info("k") is None), "the lost hold is given back"


def test_aio_a_renewal_answered_after_the_loss_does_not_revive_the_hold(server: Server) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        async with locks.lock("k", ttl=30) as h:
            real = locks._round

            async def round_then_lost(*args: object, **kwargs: object) -> object:
                rnd = await real(*args, **kwargs)  # type: ignore[arg-type]
                h._lose("lost while the renewal ran (the test's)")
                return rnd

            locks._round = round_then_lost  # type: ignore[method-assign,assignment]
            try:
                with pytest.raises(relock.LockLost, match="lost while the renewal ran"):
                    await h.renew()
            finally:
                locks._round = real  # type: ignore[method-assign]
            assert h.lost.is_set()

    asyncio.run(main())
    assert eventually(lambda: relock.Relock(connect(server)).info("k") is None), "given back"


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_waiters_of_a_key_nobody_waits_for(server: Server) -> None:
    # The module has LOCK.WAITERS: an empty queue (also for a missing key), not an error.
    assert relock.Relock(connect(server)).waiters("k") == []


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_limit_is_refused_over_independent_masters(servers3: list[Server]) -> None:
    locks = relock.Relock([connect(s) for s in servers3])
    with pytest.raises(relock.InvalidArgument, match=r"\{A,B\}"):
        locks.acquire("k", limit=2)
    with locks.lock("k", shared=True) as h:  # a read lock over a quorum is sound
        assert len(h.tokens) >= 2


# From test_aio.py (the asyncio client against real servers).
def test_acquire_loss_and_release(server: Server, protocol: str) -> None:
    async def main() -> None:
        r = aconnect(server, protocol)
        locks = relock.aio.Relock(r)
        async with locks.lock("k", ttl=1.2) as h:
            await wait_out_ttl_async(2.4)  # renewed past its ttl (every 0.4 s: a busy machine's hiccup is no loss)
            h.check()
            info = await locks.info("k")
            assert info is not None and info.owner == h.owner and info.token == h.token
            assert await r.execute_command("LOCK.FORCERELEASE", "k") == 1
            await asyncio.wait_for(h.lost.wait(), 10)
            assert h.reason and "LOCK.RENEW answered nil" in h.reason
            with pytest.raises(relock.LockLost):
                h.check()
        assert await locks.info("k") is None
        await locks.settle()
        await r.aclose()

    asyncio.run(main())


# From test_more.py (what the module added after the first packages).
def test_history_log_and_stats(server: Server, protocol: str) -> None:
    r = connect(server, protocol)
    locks = relock.Relock(r)
    locks.reset_log()
    h = locks.acquire("hot", ttl=5)
    assert h is not None
    assert locks.acquire("hot", wait=0.05) is None  # one wait that timed out
    locks.force_release("hot")
    assert h.lost.wait(10)
    hist = locks.history("hot")
    assert [e.reason for e in hist] == ["forcereleased"]
    e = hist[0]
    assert e.owner == h.owner and e.token == h.token and e.key == "hot" and e.held is not None
    assert e.who is not None and e.who.client is not None and e.who.command == "LOCK.FORCERELEASE" and e.time > 0
    assert [x.key for x in locks.log()] == ["hot"]
    stats = locks.stats()
    assert stats and stats[0].key == "hot" and stats[0].waits >= 1 and stats[0].timeouts >= 1
    assert stats[0].wait_ms_total >= 40
    locks.reset_log()
    assert locks.log() == [] and locks.history("hot") == []


# From test_more.py (what the module added after the first packages).
def test_waiters_show_permits(server: Server, protocol: str) -> None:
    locks = relock.Relock(connect(server, protocol))
    h = locks.acquire("sem", shared=True, limit=3, permits=3)
    assert h is not None
    with cf.ThreadPoolExecutor(1) as pool:
        f = pool.submit(locks.acquire, "sem", 5, 10, True, 3, 2)
        assert eventually(lambda: len(locks.waiters("sem")) == 1)
        (w,) = locks.waiters("sem")
        assert (w.mode, w.limit, w.permits) == ("shared", 3, 2)
        h.release()
        got = f.result(10)
        assert got is not None
        (holder,) = locks.holders("sem")
        assert holder.permits == 2
        info = locks.info("sem")
        assert info is not None and info.permits_free == 1
        got.release()


# From test_more.py (what the module added after the first packages).
def test_permits_sum_to_the_limit(server: Server) -> None:
    locks = relock.Relock(connect(server))
    a = locks.acquire("pool", shared=True, limit=5, permits=3, wait=0)
    assert a is not None
    assert locks.acquire("pool", shared=True, limit=5, permits=3, wait=0) is None
    b = locks.acquire("pool", shared=True, limit=5, permits=2, wait=0)
    assert b is not None
    with a.reenter() as count:  # same permits: the count goes up, not the permits
        assert count == 2
    a.release()
    b.release()
    with pytest.raises(relock.InvalidArgument):
        locks.acquire("pool", shared=True, permits=2)
    with pytest.raises(relock.InvalidArgument):
        locks.acquire("pool", shared=True, limit=2, permits=3)


# From test_more.py (what the module added after the first packages).
def test_other_permits_is_an_error_of_its_own(server: Server, protocol: str) -> None:
    r = connect(server, protocol)
    r.execute_command("LOCK.ACQUIRE", "pool", "me", 10000, "SHARED", "LIMIT", 5, "PERMITS", 1)
    with pytest.raises(redis.ResponseError) as raw:
        r.execute_command("LOCK.REENTER", "pool", "me", 10000, "SHARED", "LIMIT", 5, "PERMITS", 2)
    f = core.classify(raw.value)
    assert f.other_permits and f.permanent
    rnd: core.Round[int] = core.Round(["s"], 0.0)
    rnd.on_reply(0, None, f)
    e = rnd.permanent_error("pool")
    assert isinstance(e, relock.OtherPermits) and not e.retryable


# From test_more.py (what the module added after the first packages).
def test_downgrade_lets_readers_in(server: Server, protocol: str) -> None:
    locks = relock.Relock(connect(server, protocol))
    with locks.lock("doc", ttl=5) as w:
        with cf.ThreadPoolExecutor(1) as pool:
            reader = pool.submit(locks.acquire, "doc", 5, 10, True)
            assert eventually(lambda: len(locks.waiters("doc")) == 1)
            w.downgrade()
            r = reader.result(10)
            assert r is not None
            assert w.shared and w.token == w.token
            info = locks.info("doc")
            assert info is not None and info.mode == "shared" and info.holders == 2
            w.downgrade()  # again: nothing changes
            with w.reenter() as count:
                assert count == 2
            r.release()
        w.check()


# From test_more.py (what the module added after the first packages).
def test_a_huge_owner_prefix_still_fits(server: Server) -> None:
    locks = relock.Relock(connect(server), owner_prefix="é" * 300)
    with locks.lock_all(["a", "b"]) as g:
        assert len(g.owner.encode()) <= 256 and g.owner.endswith(g.owner[-32:])
        assert locks.info("a") is not None


# From test_more.py (what the module added after the first packages).
# Alone (conftest.py): its first calls must land within the server's 1.5 s grace.
@pytest.mark.alone
def test_restart_grace_grants_nothing_then_serves(protocol: str) -> None:
    s = Server("--relock.restart-grace-ms", "1500")
    try:
        r = connect(s, protocol)
        locks = relock.Relock(r)
        assert int(r.info("relock")["relock_grace_left_ms"]) > 0
        assert locks.acquire("k", ttl=1, wait=0) is None  # not granted, not an error
        with pytest.raises(relock.NotAcquired) as e:
            with locks.lock("k", ttl=1, wait=0):
                pass
        assert e.value.retryable and "restart grace" in str(e.value)
        assert locks.acquire_all(["a", "b"], ttl=1, wait=0) is None
        with locks.lock("k", ttl=1, wait=20) as h:  # waits out the grace
            assert h.token > 0
            assert int(r.info("relock")["relock_grace_left_ms"]) == 0
        with locks.lock_all(["a", "b"], ttl=1, wait=20) as g:
            assert g.token > 0
    finally:
        s.close()


# From test_more.py (what the module added after the first packages).
def test_aio_reasons_groups_permits_downgrade(server: Server, protocol: str) -> None:
    async def main() -> None:
        r = aconnect(server, protocol)
        locks = relock.aio.Relock(r)
        ops = aredis.Redis.from_url(f"{server.url}?protocol={protocol}", single_connection_client=True)
        await ops.client_setname("ops")
        async with locks.lock("job", ttl=2) as h:
            await ops.execute_command("LOCK.FORCERELEASE", "job")
            await asyncio.wait_for(h.lost.wait(), 10)
            assert h.cause == "forcereleased" and h.who is not None
            assert h.who.client == await ops.client_id() and h.who.name == "ops"
        await ops.aclose()
        assert [e.reason for e in await locks.history("job")] == ["forcereleased"]
        assert (await locks.log())[0].key == "job"
        assert isinstance(await locks.stats(), list)
        async with locks.lock_all(["x", "y"], ttl=0.6) as g:
            await wait_out_ttl_async(1.0)  # renewed past its ttl
            g.check()
            assert len(set(g.key_tokens.values())) == 1
        assert await r.exists("x", "y") == 0
        p = await locks.acquire("sem", shared=True, limit=4, permits=3)
        assert p is not None
        assert await locks.acquire("sem", shared=True, limit=4, permits=2, wait=0) is None
        await p.release()
        w = await locks.acquire("doc")
        assert w is not None
        await w.downgrade()
        info = await locks.info("doc")
        assert info is not None and info.mode == "shared" and w.shared
        await w.release()

        async def worker(order: list[str]) -> int:
            n = 0
            for i in range(20):
                async with locks.lock_all(order[: 3 + i % 2], ttl=5, wait=30):
                    n += 1
            return n

        keys = ["p", "q", "r", "s"]
        counts = await asyncio.wait_for(asyncio.gather(worker(keys), worker(keys[::-1])), 60)
        assert list(counts) == [20, 20]
        await locks.aclose()
        await r.aclose()

    asyncio.run(main())


# From test_more.py (what the module added after the first packages).
def test_aio_grace_is_not_granting() -> None:
    s = Server("--relock.restart-grace-ms", "1000")

    async def main() -> None:
        r = aconnect(s)
        locks = relock.aio.Relock(r)
        assert await locks.acquire("k", ttl=1, wait=0) is None
        assert await locks.acquire_all(["a", "b"], ttl=1, wait=0) is None
        h = await locks.acquire_all(["a", "b"], ttl=1, wait=20)
        assert h is not None
        await h.release()
        await locks.aclose()
        await r.aclose()

    try:
        asyncio.run(main())
    finally:
        s.close()


# From test_more.py (what the module added after the first packages).
def test_bad_replies_are_read_as_nothing_not_a_crash() -> None:
    assert core.parse_log("s", 42) == [] and core.parse_log("s", None) == []
    (e,) = core.parse_log("s", [7])
    assert e.reason == "" and e.who is None
    (e,) = core.parse_log("s", [["time", "soon", "held", "long", "token", [1]]])
    assert e.time == 0 and e.held == 0 and e.token == 0
    assert core.parse_stats("s", b"oops") == []
    assert core.as_map(3) == {}
    with pytest.raises(ValueError):
        core.group_tokens(["a", "b"], [1])
    f = core.classify(ValueError("LOCK.MACQUIRE answered 1 tokens for 2 keys"))
    assert f.permanent  # a reply relock cannot read is not retried forever


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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
    # 60 s, as the other fresh-interpreter tests: an endless loop never returns, and a fresh
    # interpreter's imports plus three short calls took over 5 s in a fresh `make test` with the
    # lanes at full load (2026-12-04), which is not what this test is about.
    out = run_python(code, 60)
    assert out is not None, "acquire(ttl=0.001) with wait=None never returned (an endless acquire/release loop)"
    assert "wait0: InvalidArgument False" in out.stdout, out.stdout + out.stderr


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_a_refused_renewal_ttl_is_an_error_and_keeps_the_hold() -> None:
    """Attack: a server with relock.restart-grace-ms 1000 (after the grace) and a valid hold;
    ``hold.renew(5)`` asks for a ttl the server refuses (ERR ttl_ms exceeds
    relock.restart-grace-ms). Must hold (docs: "a ServerError that is not retryable"): that
    error, and the hold stays held and renewed."""
    s = Server("--relock.restart-grace-ms", "1000")
    try:
        locks = relock.Relock(connect(s))
        holds: list[relock.Hold] = []

        def granted() -> bool:  # once the restart grace is over
            got = locks.acquire("g", ttl=0.9, wait=0)
            holds.extend([got] if got is not None else [])
            return got is not None

        assert eventually(granted, 10, every=0.05)
        h = holds[0]
        with pytest.raises(relock.RelockError) as e:
            h.renew(5)
        assert type(e.value) is relock.ServerError and not e.value.retryable, repr(e.value)
        assert not h.lost.is_set()
        info = locks.info("g")
        assert info is not None and info.owner == h.owner
    finally:
        s.close()


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
# Not `alone`: with a 2 s node_timeout (below) the refusal has no tight bound to keep.
def test_a_server_without_the_module_is_named_and_not_retryable() -> None:
    """Attack: every kind of call against a server without the module. Must hold: a
    ServerError naming the server, saying the module may be missing, not retryable; no
    hang, for every wait."""
    s = Server(module=False)
    try:
        # node_timeout 2 s: what is tested is how the missing module is reported; with the
        # default 0.1 s a loaded machine's late reply is a timeout, which says nothing of the
        # module (the aio acquire returned None instead of raising in run K, 2026-12-04).
        for locks in (relock.Relock(connect(s), node_timeout=2.0),):
            for wait in (0, None, 1):
                with pytest.raises(relock.ServerError) as e:
                    locks.acquire("k", wait=wait)
                assert not e.value.retryable and e.value.servers == locks.servers
                assert "module loaded" in str(e.value)

        async def main() -> None:
            al = relock.aio.Relock(aconnect(s), node_timeout=2.0)
            for wait in (0, None, 1):
                with pytest.raises(relock.ServerError) as e:
                    await al.acquire("k", wait=wait)
                assert not e.value.retryable and "module loaded" in str(e.value)

        asyncio.run(main())
    finally:
        s.close()

