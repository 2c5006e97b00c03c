"""What the module added after the first packages: loss reasons with who, the journal and
statistics, permits, downgrade, several keys at once, the restart grace. Against real
servers, sync and asyncio, RESP2 and RESP3; waits are bounded by events, not sleeps."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
import time

import pytest
import redis
import redis.asyncio as aredis

import relock
import relock.aio
from relock import _core as core
from servers import Server, eventually


def connect(server: Server, protocol: str = "3", **kw: object) -> redis.Redis:
    return redis.Redis.from_url(f"{server.url}?protocol={protocol}", decode_responses=True, **kw)


def aconnect(server: Server, protocol: str = "3") -> aredis.Redis:
    return aredis.Redis.from_url(f"{server.url}?protocol={protocol}", decode_responses=True)


# --- why a hold was lost ----------------------------------------------------------------------


def test_loss_names_who_broke_it(server: Server, protocol: str) -> None:
    ops = connect(server, protocol)
    ops.client_setname("ops")
    locks = relock.Relock(connect(server, protocol))
    with locks.lock("job", ttl=2) as h:
        assert ops.execute_command("LOCK.FORCERELEASE", "job") == 1
        assert h.lost.wait(10)
        assert h.cause == "forcereleased" and h.loss is not None
        assert h.who is not None and h.who.client == ops.client_id()
        assert h.who.name == "ops" and h.who.user == "default" and h.who.addr
        assert f"by client {ops.client_id()} (name ops, user default" in (h.reason or "")
        with pytest.raises(relock.LockLost) as e:
            h.check()
        assert e.value.cause == "forcereleased" and e.value.who == h.who
        assert e.value.loss is h.loss


def test_loss_by_delete_and_by_flush(server: Server, protocol: str) -> None:
    r = connect(server, protocol)
    locks = relock.Relock(r)
    with locks.lock("a", ttl=2) as h:
        r.delete("a")
        assert h.lost.wait(10)
        assert h.cause == "deleted", h.reason
    with locks.lock("b", ttl=2) as h:
        r.flushall()
        assert h.lost.wait(10)
        assert h.cause == "flushed", h.reason
        assert h.loss is not None and h.loss.entry is not None and h.loss.entry.key == ""


def test_loss_with_an_empty_journal_says_it_cannot_say_why(server: Server) -> None:
    r = connect(server)
    r.config_set("relock.log-max-len", 0)
    locks = relock.Relock(r)
    with locks.lock("k", ttl=2) as h:
        r.execute_command("LOCK.FORCERELEASE", "k")
        assert h.lost.wait(10)
        assert h.cause is None and h.who is None and "cannot say why" in (h.reason or "")


def test_an_old_flush_is_not_blamed(server: Server) -> None:
    r = connect(server)
    r.config_set("relock.log-reasons", "flushed")  # the force-release below leaves no entry
    r.flushall()  # an entry older than the hold
    locks = relock.Relock(r)
    with locks.lock("k", ttl=2) as h:
        h._since = time.time() + 2  # as if granted long after the flush (beyond the 1 s slack)
        r.execute_command("LOCK.FORCERELEASE", "k")
        assert h.lost.wait(10)
        assert h.cause is None and "cannot say why" in (h.reason or "")
    with locks.lock("k", ttl=2) as h:
        r.flushall()  # a flush after the grant is its end
        assert h.lost.wait(10)
        assert h.cause == "flushed"


def test_a_vanished_server_ends_a_group_within_validity(server: Server) -> None:
    locks = relock.Relock(connect(server))
    g = locks.acquire_all(["a", "b"], ttl=0.9)
    assert g is not None
    server.kill()
    assert g.lost.wait(10)
    assert time.monotonic() < g.valid_until
    assert g.cause is None and g.reason is not None and "validity ran out" in g.reason
    assert not g.release()


def test_loss_parsing_of_bad_and_huge_entries() -> None:
    owner = "h/1/" + "f" * 32
    huge = "x" * 100_000
    entries = core.parse_log(
        "s",
        [
            ["id", 3, "time", 2000, "db", 0, "key", "k", "owner", "other", "token", 9, "reason", "expired",
             "held", "", "client-info", "", "waiters", 0],
            {"id": 2, "time": 1500, "key": "k", "owner": owner, "reason": "forcereleased", "held": 10,
             "client-info": f"id=17 addr=1.2.3.4:5 name={huge} user=admin cmd=lock.forcerelease"},
        ],
    )
    loss = core.loss_reason(entries, owner, since=0.0, now=3.0)
    assert loss.cause == "forcereleased" and loss.who is not None
    assert loss.who.client == 17 and loss.who.user == "admin" and loss.who.name == huge
    assert "1.5 s ago" in loss.message
    assert core.loss_reason(entries, "nobody", since=0.0).cause is None
    assert core.parse_who("") is None and core.parse_who("garbage") == relock.Who(None, None, None, None, None)


# --- the journal and statistics ---------------------------------------------------------------


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


# --- permits -----------------------------------------------------------------------------------


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


# --- downgrade ---------------------------------------------------------------------------------


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


def test_downgrade_of_a_lost_hold_says_why(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    h = locks.acquire("doc", ttl=5)
    assert h is not None
    r.execute_command("LOCK.FORCERELEASE", "doc")
    with pytest.raises(relock.LockLost) as e:
        h.downgrade()
    assert e.value.cause == "forcereleased"


# --- several keys ------------------------------------------------------------------------------


def test_lock_all_takes_every_key_with_one_token(server: Server, protocol: str) -> None:
    r = connect(server, protocol)
    locks = relock.Relock(r)
    with locks.lock_all(["acct:1", "acct:2", "acct:3"], ttl=0.6) as g:
        assert set(g.key_tokens) == {"acct:1", "acct:2", "acct:3"}
        assert len(set(g.key_tokens.values())) == 1 and g.token == g.key_tokens["acct:1"]
        assert locks.acquire("acct:2", wait=0) is None
        assert locks.acquire_all(["acct:3", "other"], wait=0) is None
        assert r.exists("other") == 0  # all or nothing
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # renewed as a group past its ttl
            g.check()
            time.sleep(0.05)
        for k in g.keys:
            info = locks.info(k)
            assert info is not None and info.owner == g.owner
    assert all(locks.info(k) is None for k in ("acct:1", "acct:2", "acct:3"))


def test_a_group_waits_and_is_lost_with_a_reason(server: Server, protocol: str) -> None:
    r = connect(server, protocol)
    locks = relock.Relock(r)
    one = locks.acquire("b", ttl=5)
    assert one is not None
    with cf.ThreadPoolExecutor(1) as pool:
        f = pool.submit(locks.acquire_all, ["a", "b", "c"], 2, 10)
        assert eventually(lambda: len(locks.waiters("b")) == 1)
        one.release()
        g = f.result(10)
    assert g is not None and g.key_tokens["b"] > one.token
    r.delete("c")
    assert g.lost.wait(10)
    assert g.cause == "deleted" and "key 'c'" in (g.reason or "")
    assert not g.release()
    assert locks.info("a") is None  # what was left is given back
    assert eventually(lambda: locks.info("a") is None and locks.info("b") is None)


def test_a_group_that_cannot_be_had_in_time_gives_back_what_it_took(server: Server) -> None:
    locks = relock.Relock(connect(server))
    blocker = locks.acquire("k2", ttl=10)
    assert blocker is not None
    assert locks.acquire_all(["k1", "k2"], wait=0.3) is None
    assert eventually(lambda: locks.info("k1") is None)
    with pytest.raises(relock.NotAcquired):
        with locks.lock_all(["k1", "k2"], wait=0):
            pass
    blocker.release()


def test_groups_in_opposite_orders_never_deadlock(server: Server) -> None:
    locks = relock.Relock(connect(server))
    keys = [f"res:{i}" for i in range(6)]
    done = {"fwd": 0, "back": 0}
    inside = threading.Lock()

    def worker(name: str, order: list[str], rounds: int) -> None:
        for i in range(rounds):
            # Overlapping sets, opposite orders; a wait without limit would hang on a deadlock.
            ks = order[: 4 + i % 3]
            with locks.lock_all(ks, ttl=5, wait=30):
                assert inside.acquire(blocking=False), "two groups inside at once"
                inside.release()
                done[name] += 1

    with cf.ThreadPoolExecutor(4) as pool:
        fs = [
            pool.submit(worker, "fwd", keys, 40),
            pool.submit(worker, "back", keys[::-1], 40),
        ]
        for f in fs:
            f.result(60)
    assert done == {"fwd": 40, "back": 40}


def test_group_limits(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    keys = [f"k{i}" for i in range(256)]
    with locks.lock_all(keys, ttl=5) as g:
        assert len(g.key_tokens) == 256 and locks.info("k255") is not None
        g.renew()
    assert r.dbsize() == 0
    with pytest.raises(relock.InvalidArgument):
        locks.acquire_all(keys + ["k256"])
    with pytest.raises(relock.InvalidArgument):
        locks.acquire_all(["a", "a"])
    with pytest.raises(relock.InvalidArgument):
        locks.acquire_all([])
    with pytest.raises(relock.InvalidArgument):
        locks.acquire_all("ab")
    r.set("str", "v")
    with pytest.raises(relock.ServerError) as e:
        locks.acquire_all(["x", "str"])
    assert not e.value.retryable and "WRONGTYPE" in str(e.value)


def test_a_huge_owner_prefix_still_fits(server: Server) -> None:
    locks = relock.Relock(connect(server), owner_prefix="é" * 300)
    with locks.lock_all(["a", "b"]) as g:
        assert len(g.owner.encode()) <= 256 and g.owner.endswith(g.owner[-32:])
        assert locks.info("a") is not None


# --- restart grace -----------------------------------------------------------------------------


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


def test_redlock_counts_a_master_in_grace_as_a_no_vote(servers3: list[Server]) -> None:
    grace = Server("--relock.restart-grace-ms", "60000")
    try:
        clients = [connect(s) for s in servers3[:2]] + [connect(grace)]
        locks = relock.Relock(clients)
        with locks.lock("k", ttl=5, wait=0) as h:
            assert len(h.tokens) == 2  # the master in grace did not vote
        with locks.lock_all(["a", "b"], ttl=5, wait=0) as g:
            assert g.token > 0
        only_grace = relock.Relock([connect(grace), connect(servers3[2])] + [connect(servers3[0])])
        servers3[0].pause()
        try:
            assert only_grace.acquire("z", ttl=5, wait=0) is None  # no quorum, no error
        finally:
            servers3[0].resume()
    finally:
        grace.close()


# --- asyncio -----------------------------------------------------------------------------------


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
            await asyncio.sleep(1.0)  # renewed past its ttl
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
