"""Several keys held together (lock_all, acquire_all): one token, waits in one global order,
losses, give-backs and limits."""

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
from helpers import Lateness, connect, eventually, until, wait_out_ttl
from servers import LossProxy, Server


# From test_more.py (what the module added after the first packages).
# Alone (conftest.py): a 0.6 s ttl renewed in time by a process that has a core.
@pytest.mark.alone
def test_lock_all_takes_every_key_with_one_token(server: Server, protocol: str) -> None:
    r = connect(server, protocol)
    locks = relock.Relock(r)
    with locks.lock_all(["acct:1", "acct:2", "acct:3"], ttl=0.6) as g:
        assert set(g.key_tokens) == {"acct:1", "acct:2", "acct:3"}
        assert len(set(g.key_tokens.values())) == 1 and g.token == g.key_tokens["acct:1"]
        assert locks.acquire("acct:2", wait=0) is None
        assert locks.acquire_all(["acct:3", "other"], wait=0) is None
        assert r.exists("other") == 0  # all or nothing
        wait_out_ttl(1.5, during=g.check)  # renewed as a group past its ttl
        for k in g.keys:
            info = locks.info(k)
            assert info is not None and info.owner == g.owner
    assert all(locks.info(k) is None for k in ("acct:1", "acct:2", "acct:3"))


# From test_more.py (what the module added after the first packages).
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


# From test_more.py (what the module added after the first packages).
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


# From test_more.py (what the module added after the first packages).
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


# From test_more.py (what the module added after the first packages).
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


# From test_more.py (what the module added after the first packages).
def test_a_vanished_server_ends_a_group_within_validity(server: Server) -> None:
    locks = relock.Relock(connect(server))
    g = locks.acquire_all(["a", "b"], ttl=0.9)
    assert g is not None
    with Lateness() as late:
        server.kill()
        assert g.lost.wait(10)
        now = time.monotonic()
    # The loss timer is due loss_lead before the validity ends; the client's timer thread and
    # this one after the event are each as late as the machine runs threads (measured: 116 ms
    # past validity under make test's four lanes and a build), and 50 ms however idle.
    allowed = max(0.05, 2 * late.most + 0.01)
    assert now <= g.valid_until + allowed, f"{now - g.valid_until:.3f} s past validity; threads ran up to {late.most:.3f} s late"
    assert g.cause is None and g.reason is not None and "validity ran out" in g.reason
    assert not g.release()



def test_a_lost_grant_in_the_key_by_key_wait_never_revokes_the_group(server: Server, proxy: LossProxy) -> None:
    """A key waited for whose grant's reply was lost is given back in the background, now and
    once more a little later (a grant may still land). Asked for again under the same owner,
    that later give-back would end the new grant after the group was returned: the group
    starts over under a new owner instead, and every key of the hold returned stays its own
    once the give-backs are done. Sync and asyncio."""
    r = connect(server)

    def releases() -> int:
        return int(r.info("commandstats").get("cmdstat_LOCK.RELEASE", {}).get("calls", 0))

    def held_by(owner: str, *keys: str) -> bool:
        return all((r.execute_command("LOCK.INFO", k) or {}).get("owner") == owner for k in keys)

    through = redis.Redis(port=proxy.port, decode_responses=True)
    locks = relock.Relock(through, retry_delay=0.001)
    assert r.execute_command("LOCK.ACQUIRE", "k1", "other", 30000) is not None
    with cf.ThreadPoolExecutor(1) as pool:
        f = pool.submit(locks.acquire_all, ["k1", "k2"], 30, 20)
        assert eventually(lambda: r.execute_command("LOCK.INFO", "k1")["waiters"] == 1, 10)
        proxy.arm(b"LOCK.WAIT")  # the next one: k2's, free, granted, its reply lost
        r.execute_command("LOCK.RELEASE", "k1", "other")
        before = releases()
        g = f.result(20)
    assert g is not None and proxy.lost == 1
    # The lost grant's two give-backs (now and 100 ms later) are done: the group is still its own.
    assert eventually(lambda: releases() >= before + 2, 10)
    assert held_by(g.owner, "k1", "k2"), "a give-back of the lost grant ended the group's key"
    assert g.release()

    async def main() -> None:
        alocks = relock.aio.Relock(aredis.Redis(port=proxy.port, decode_responses=True), retry_delay=0.001)
        assert r.execute_command("LOCK.ACQUIRE", "k1", "other", 30000) is not None
        task = asyncio.ensure_future(alocks.acquire_all(["k1", "k2"], 30, 20))
        assert await until(lambda: r.execute_command("LOCK.INFO", "k1")["waiters"] == 1, 10)
        proxy.arm(b"LOCK.WAIT")
        r.execute_command("LOCK.RELEASE", "k1", "other")
        ag = await asyncio.wait_for(task, 20)
        assert ag is not None and proxy.lost == 2
        await alocks.settle()
        assert held_by(ag.owner, "k1", "k2"), "a give-back of the lost grant ended the group's key"
        assert await ag.release()
        await alocks.aclose()

    asyncio.run(main())
