"""``replica_acks`` / ``replica_ack_timeout`` against a real master with one replica: a grant
the replica acknowledged holds; with the replica stopped (SIGSTOP), an acquisition and a
campaign (whose grant comes from a blocked LOCK.WAIT) fail with ``NotAcknowledged``, naming
the master and how many acknowledged, and leave no hold on the master; a renewal the replica
did not acknowledge does not count. Sync and asyncio."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterator

import pytest
import redis
import redis.asyncio as aredis

import relock
import relock.aio
from helpers import aconnect, connect, direct, eventually, info, until, waiters, within
from servers import LossProxy, Server


@pytest.fixture
def pair() -> Iterator[tuple[Server, Server]]:
    """A master and its replica (both with the module), the replica in sync and acknowledging
    writes."""
    # Diskless sync at once: by default the master waits 5 s for more replicas to come.
    master = Server("--repl-diskless-sync-delay", "0")
    replica: Server | None = None
    try:
        replica = Server("--replicaof", "127.0.0.1", str(master.port))

        def synced() -> bool:
            m = direct(master).info("replication")
            assert replica is not None
            r = direct(replica).info("replication")
            if not (int(m.get("connected_slaves", 0)) == 1 and r.get("master_link_status") == "up"):
                return False
            # Online and acknowledging: a diskless sync puts the replica online at its first
            # REPLCONF ACK, and a WAIT with no write before it on its connection counts it at once.
            if (m.get("slave0") or {}).get("state") != "online":
                return False
            pipe = direct(master).pipeline(transaction=False)
            pipe.set("relock-test:linked", "1")
            pipe.execute_command("WAIT", 1, 100)
            return int(pipe.execute()[1]) >= 1

        assert eventually(synced, 30), "the replica did not sync"
        yield master, replica
    finally:
        if replica is not None:
            replica.close()
        master.close()


def stopped(replica: Server) -> Any:
    """The replica stopped (SIGSTOP) for the ``with`` block, resumed after."""

    class Stopped:
        def __enter__(self) -> None:
            replica.pause()

        def __exit__(self, *exc: object) -> None:
            replica.resume()

    return Stopped()


def check_not_acked(e: relock.NotAcknowledged, master: Server) -> None:
    name = f"127.0.0.1:{master.port}"
    assert e.master == name and e.acked == 0 and e.wanted == 1
    assert name in str(e) and "only 0 of 1 required replica acknowledgements" in str(e)


def test_options_are_checked(pair: tuple[Server, Server]) -> None:
    master, _ = pair
    for bad in (-1, True, 1.5):
        with pytest.raises(relock.InvalidArgument):
            relock.Relock(connect(master), replica_acks=bad)  # type: ignore[arg-type]
    with pytest.raises(relock.InvalidArgument):
        relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=0)
    with pytest.raises(relock.InvalidArgument):
        relock.aio.Relock(aconnect(master), replica_acks=1, replica_ack_timeout=float("nan"))


def test_an_acknowledged_grant_holds(pair: tuple[Server, Server]) -> None:
    master, _ = pair
    locks = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=2.0)
    hold = locks.acquire("acked", ttl=10, wait=1)
    assert hold is not None and info(master, "acked") is not None
    hold.renew()
    assert hold.release()
    lead = locks.campaign("acked-election", "n1", ttl=10, timeout=1)
    assert lead.term > 0 and lead.resign()


def test_a_grant_not_acknowledged_is_released_and_named(pair: tuple[Server, Server]) -> None:
    master, replica = pair
    locks = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=0.2)
    with stopped(replica):
        for wait in (0, 1, None):
            with pytest.raises(relock.NotAcknowledged) as caught:
                within(10, lambda: locks.acquire("lonely", ttl=10, wait=wait))
            check_not_acked(caught.value, master)
            assert eventually(lambda: info(master, "lonely") is None, 5), "the grant stayed on the master"
        with pytest.raises(relock.NotAcknowledged) as caught:
            within(10, lambda: locks.campaign("lonely-election", "n1", ttl=10, timeout=1))
        check_not_acked(caught.value, master)
        assert eventually(lambda: info(master, "lonely-election") is None, 5)
        with pytest.raises(relock.NotAcknowledged):
            within(10, lambda: locks.acquire_all(["g1", "g2"], ttl=10, wait=0))
        assert eventually(lambda: info(master, "g1") is None and info(master, "g2") is None, 5)
    # The replica back: it acknowledges again (within a bound a loaded machine keeps).
    hold = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=5).acquire("lonely", ttl=10, wait=1)
    assert hold is not None and hold.release()


def test_a_campaign_granted_from_the_queue_waits_for_the_replica(pair: tuple[Server, Server]) -> None:
    """The grant of a blocked LOCK.WAIT (made when the leader resigns) is what WAIT must
    cover: queued first, then the replica stopped, then the leader gone."""
    master, replica = pair
    locks = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=0.2)
    leader = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=5).campaign("queued", "n0", ttl=30, timeout=5)
    got: list[BaseException | relock.Leadership] = []

    def run() -> None:
        try:
            got.append(locks.campaign("queued", "n1", ttl=30, timeout=20))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            got.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert eventually(lambda: waiters(master, "queued") == 1, 10)
    with stopped(replica):
        direct(master).execute_command("LOCK.RELEASE", "queued", leader.owner)
        t.join(20)
        assert not t.is_alive() and len(got) == 1
        assert isinstance(got[0], relock.NotAcknowledged), got[0]
        check_not_acked(got[0], master)
        assert eventually(lambda: info(master, "queued") is None, 5)


def test_a_renewal_not_acknowledged_does_not_count(pair: tuple[Server, Server]) -> None:
    master, replica = pair
    locks = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=0.2)
    hold = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=5).acquire("renewed", ttl=30, wait=1)
    assert hold is not None
    before = hold.valid_until
    with stopped(replica):
        with pytest.raises(relock.NotAcquired) as caught:
            within(10, hold.renew)
        assert "replica acknowledgements" in str(caught.value)
        assert hold.valid_until == before and hold.is_valid
    assert hold.release()


def test_asyncio_acknowledged_and_not(pair: tuple[Server, Server]) -> None:
    master, replica = pair

    async def main() -> None:
        acked = relock.aio.Relock(aconnect(master), replica_acks=1, replica_ack_timeout=5)
        hold = await acked.acquire("a-acked", ttl=10, wait=1)
        assert hold is not None and await hold.release()
        lead = await acked.campaign("a-election", "n1", ttl=10, timeout=1)
        assert await lead.resign()
        await acked.aclose()
        locks = relock.aio.Relock(aconnect(master), replica_acks=1, replica_ack_timeout=0.2)
        with stopped(replica):
            for wait in (0, None):
                with pytest.raises(relock.NotAcknowledged) as caught:
                    await asyncio.wait_for(locks.acquire("a-lonely", ttl=10, wait=wait), 10)
                check_not_acked(caught.value, master)
            with pytest.raises(relock.NotAcknowledged) as caught:
                await asyncio.wait_for(locks.campaign("a-election", "n1", ttl=10, timeout=1), 10)
            check_not_acked(caught.value, master)
            assert await until(lambda: info(master, "a-lonely") is None and info(master, "a-election") is None, 5)
        await locks.aclose()

    asyncio.run(main())


def test_a_lost_wait_reply_never_sends_the_acquisition_again(pair: tuple[Server, Server]) -> None:
    """The send-once side of replica_acks: the WAIT's reply lost (the connection reset after
    the master answered it) counts as no acknowledgement; the grant is released, and the
    LOCK.ACQUIRE before it ran once, never re-sent by relock or redis-py (sync and asyncio)."""
    master, _ = pair
    proxy = LossProxy(master.port)
    r = direct(master)

    def acquires() -> int:
        return int(r.info("commandstats").get("cmdstat_LOCK.ACQUIRE", {}).get("calls", 0))

    try:
        through = redis.Redis(port=proxy.port, decode_responses=True)
        locks = relock.Relock(through, replica_acks=1, replica_ack_timeout=2)
        before = acquires()
        proxy.arm(b"WAIT")
        with pytest.raises(relock.NotAcknowledged) as caught:
            within(10, lambda: locks.acquire("once", ttl=10, wait=0))
        assert "WAIT got no answer" in str(caught.value) and proxy.lost == 1
        assert acquires() == before + 1
        assert eventually(lambda: info(master, "once") is None, 5)

        async def main() -> None:
            alocks = relock.aio.Relock(aredis.Redis(port=proxy.port, decode_responses=True), replica_acks=1, replica_ack_timeout=2)
            proxy.arm(b"WAIT")
            with pytest.raises(relock.NotAcknowledged, match="WAIT got no answer"):
                await asyncio.wait_for(alocks.acquire("once-a", ttl=10, wait=0), 10)
            await alocks.aclose()

        before = acquires()
        asyncio.run(main())
        assert acquires() == before + 1 and proxy.lost == 2
        assert eventually(lambda: info(master, "once-a") is None, 5)
    finally:
        proxy.close()


def test_a_reentry_not_acknowledged_is_taken_back_and_named(pair: tuple[Server, Server]) -> None:
    """A re-entry waits for the replicas too (as relock-client's, Go's and Node's): one they
    did not acknowledge fails with ``NotAcknowledged`` naming the master, the section is not
    entered, and only its level is taken back (LOCK.RELEASE FROM c+1): the outer hold stays,
    with its count. Sync and asyncio."""
    master, replica = pair
    # node_timeout: the take-back answered in time on a loaded machine (counted below).
    locks = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=1, node_timeout=2)
    hold = locks.acquire("reentered", ttl=30, wait=5)
    assert hold is not None
    entered: list[int] = []

    def releases() -> tuple[int, int]:
        stats = direct(master).info("commandstats").get("cmdstat_LOCK.RELEASE", {})
        return int(stats.get("calls", 0)), int(stats.get("failed_calls", 0))

    before = releases()
    with stopped(replica):
        with pytest.raises(relock.NotAcknowledged) as caught:

            def nested() -> None:
                with hold.reenter() as n:
                    entered.append(n)

            within(10, nested)
        check_not_acked(caught.value, master)
        assert entered == []
        # One take-back, FROM 2 (the grant's FROM 1 meets count 2: refused), answered, so
        # never sent again.
        calls, failed = releases()
        assert (calls - before[0], failed - before[1]) == (1, 0)
        now = info(master, "reentered")
        assert now is not None and now["owner"] == hold.owner and int(now["count"]) == 1
        assert hold.is_valid
    # The replica back: the next re-entry is acknowledged, and steps the count as usual.
    with hold.reenter() as n:
        assert n == 2 and int((info(master, "reentered") or {})["count"]) == 2
    assert int((info(master, "reentered") or {})["count"]) == 1
    assert hold.release() and info(master, "reentered") is None

    async def main() -> None:
        alocks = relock.aio.Relock(aconnect(master), replica_acks=1, replica_ack_timeout=1)
        ahold = await alocks.acquire("a-reentered", ttl=30, wait=5)
        assert ahold is not None
        with stopped(replica):
            with pytest.raises(relock.NotAcknowledged) as caught:
                async with ahold.reenter() as n:
                    entered.append(n)
            check_not_acked(caught.value, master)
            assert entered == []
            now = info(master, "a-reentered")
            assert now is not None and now["owner"] == ahold.owner and int(now["count"]) == 1
        async with ahold.reenter() as n:
            assert n == 2
        assert await ahold.release() and info(master, "a-reentered") is None
        await alocks.aclose()

    asyncio.run(main())


def test_a_group_key_waited_for_and_not_acknowledged_is_named_at_once(pair: tuple[Server, Server]) -> None:
    """The key-by-key wait of ``acquire_all`` (a key taken: LOCK.MACQUIRE refused) raises
    ``NotAcknowledged`` at once too, as the group's first try and ``acquire`` do: a key whose
    grant the replica did not acknowledge is not asked for again under the same owner (a
    give-back of the failed grant still under way would end that new grant), and what the
    group took is given back."""
    master, replica = pair
    r = direct(master)
    assert r.execute_command("LOCK.ACQUIRE", "wb", "other", 30000) is not None
    locks = relock.Relock(connect(master), replica_acks=1, replica_ack_timeout=1, retry_delay=0.01)
    got: list[BaseException | relock.GroupHold | None] = []

    def run() -> None:
        try:
            got.append(locks.acquire_all(["wa", "wb"], ttl=30, wait=20))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            got.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert eventually(lambda: waiters(master, "wb") == 1, 10), "the group did not wait for wb"
    with stopped(replica):
        r.execute_command("LOCK.RELEASE", "wb", "other")  # handed to the group's wait
        t.join(10)
        assert not t.is_alive() and len(got) == 1, "the group wait went on"
        assert isinstance(got[0], relock.NotAcknowledged), got[0]
        check_not_acked(got[0], master)
        assert eventually(lambda: info(master, "wa") is None and info(master, "wb") is None, 5)
