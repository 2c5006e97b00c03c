"""The send-once rule (spec/client-cases/README.md): a fenced write (``hold.fenced``) is sent
at most once. Its reply lost (the connection reset after the server ran it, or no reply in
time) is an error that says it may have run, and the write is never sent again, on one server
or in a cluster; a refusal that says it did not run (``MOVED`` after a failover) is followed.
Each case counts how many times the inner ``INCR`` ran."""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

import pytest
import redis
import redis.asyncio as aredis
import redis.asyncio.cluster as acluster
import redis.cluster

import relock
import relock.aio
from helpers import direct
from servers import Cluster, LossProxy, Server

MAY_HAVE_RUN = "it may have run"
#: The fenced INCR on the wire (not redis-py's ``COMMAND GETKEYS LOCK.FENCED ...``).
FENCED_INCR = b"*5\r\n$11\r\nLOCK.FENCED\r\n"


def test_sync_a_fenced_write_whose_reply_was_lost_is_not_sent_again(server: Server, proxy: LossProxy) -> None:
    locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=0.5)
    h = locks.acquire("{so}", ttl=30)
    assert h is not None
    proxy.arm(FENCED_INCR)
    with pytest.raises(relock.ServerError, match=MAY_HAVE_RUN):
        h.fenced("INCR", "{so}:n")
    assert proxy.lost == 1
    assert direct(server).get("{so}:n") == "1"  # ran once, and only once
    # No reply in time (a slow reply): the same, and it too ran once.
    proxy.arm(FENCED_INCR, delay=1.5)
    with pytest.raises(relock.ServerError, match=MAY_HAVE_RUN):
        h.fenced("INCR", "{so}:n")
    assert proxy.delivered.wait(10) or direct(server).get("{so}:n") == "2"
    assert direct(server).get("{so}:n") == "2"
    assert h.fenced("INCR", "{so}:n") == 3
    h.release()


def test_aio_a_fenced_write_whose_reply_was_lost_is_not_sent_again(server: Server, proxy: LossProxy) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=0.5)
        h = await locks.acquire("{so}", ttl=30)
        assert h is not None
        proxy.arm(FENCED_INCR)
        with pytest.raises(relock.ServerError, match=MAY_HAVE_RUN):
            await h.fenced("INCR", "{so}:n")
        assert proxy.lost == 1
        assert direct(server).get("{so}:n") == "1"
        proxy.arm(FENCED_INCR, delay=1.5)
        with pytest.raises(relock.ServerError, match=MAY_HAVE_RUN):
            await h.fenced("INCR", "{so}:n")
        await asyncio.to_thread(proxy.delivered.wait, 10)
        assert direct(server).get("{so}:n") == "2"
        assert await h.fenced("INCR", "{so}:n") == 3
        await h.release()
        await locks.aclose()

    asyncio.run(main())


class ProxiedCluster:
    """A cluster whose every node is reached through a LossProxy (``address_remap``)."""

    def __init__(self) -> None:
        self.cluster = Cluster()
        self.proxies = {n.port: LossProxy(n.port) for n in self.cluster.nodes}

    def remap(self, addr: tuple[str, int]) -> tuple[str, int]:
        host, port = addr
        p = self.proxies.get(int(port))
        return ("127.0.0.1", p.port) if p is not None else (host, port)

    def proxy_of(self, key: str) -> LossProxy:
        return self.proxies[self.cluster.master_of(key).port]

    def counter(self, key: str) -> str | None:
        v = self.cluster.conn(self.cluster.master_of(key)).get(key)
        return None if v is None else str(v)

    def close(self) -> None:
        for p in self.proxies.values():
            p.close()
        self.cluster.close()


#: The tests that share the module's one ProxiedCluster run in one worker, one after the other
#: (``--dist loadgroup`` in scripts/test-clients), in the order they are written: spread over
#: workers, each worker would build a six-node cluster of its own.
SHARED_CLUSTER = pytest.mark.xdist_group("send_once_cluster")


@pytest.fixture(scope="module")
def proxied() -> Iterator[ProxiedCluster]:
    c = ProxiedCluster()
    try:
        yield c
    finally:
        c.close()


@SHARED_CLUSTER
def test_sync_cluster_a_fenced_write_is_sent_once(proxied: ProxiedCluster) -> None:
    start = proxied.cluster.nodes[0].port
    # socket_timeout: the driver's own timeout, after which redis-py's cluster client re-sends.
    rc: Any = redis.cluster.RedisCluster(host="127.0.0.1", port=start, address_remap=proxied.remap, socket_timeout=0.6)
    locks = relock.Relock(rc, node_timeout=0.5)
    h = locks.acquire("{sc}", ttl=60)
    assert h is not None
    p = proxied.proxy_of("{sc}")
    rc.nodes_manager.initialize()  # as in the asyncio test below
    assert rc.get_node_from_key("{sc}").port == p.port
    p.arm(FENCED_INCR)
    with pytest.raises(relock.ServerError, match=MAY_HAVE_RUN):
        h.fenced("INCR", "{sc}:n")
    assert p.lost == 1
    assert proxied.counter("{sc}:n") == "1"  # redis-py's cluster client re-sent it: 2
    p.delivered.clear()
    p.arm(FENCED_INCR, delay=1.5)
    with pytest.raises(relock.ServerError, match=MAY_HAVE_RUN):
        h.fenced("INCR", "{sc}:n")
    assert p.delivered.wait(10)
    assert proxied.counter("{sc}:n") == "2"
    assert h.fenced("INCR", "{sc}:n") == 3
    h.release()
    rc.close()


@SHARED_CLUSTER
def test_aio_cluster_a_fenced_write_is_sent_once(proxied: ProxiedCluster) -> None:
    async def main() -> None:
        start = proxied.cluster.nodes[0].port
        rc: Any = acluster.RedisCluster(host="127.0.0.1", port=start, address_remap=proxied.remap, socket_timeout=0.6)
        locks = relock.aio.Relock(rc, node_timeout=0.5)
        h = await locks.acquire("{ac}", ttl=60)
        assert h is not None
        p = proxied.proxy_of("{ac}")
        # redis-py's asyncio cluster client applies a MOVED without its address_remap (a node
        # by its own port, past the proxy): its map is read again, through the remap.
        await rc.nodes_manager.initialize()
        assert rc.get_node_from_key("{ac}").port == p.port
        lost = p.lost
        p.arm(FENCED_INCR)
        with pytest.raises(relock.ServerError, match=MAY_HAVE_RUN):
            await h.fenced("INCR", "{ac}:n")
        assert p.lost == lost + 1
        assert proxied.counter("{ac}:n") == "1"
        p.delivered.clear()
        p.arm(FENCED_INCR, delay=1.5)
        with pytest.raises(relock.ServerError, match=MAY_HAVE_RUN):
            await h.fenced("INCR", "{ac}:n")
        assert await asyncio.to_thread(p.delivered.wait, 10)
        assert proxied.counter("{ac}:n") == "2"
        assert await h.fenced("INCR", "{ac}:n") == 3
        await h.release()
        await rc.aclose()

    asyncio.run(main())


@SHARED_CLUSTER
def test_cluster_a_fenced_write_follows_moved_after_a_failover_and_runs_once(proxied: ProxiedCluster) -> None:
    """MOVED says the old master did not run it: the write goes on to the new master, once."""
    c = proxied.cluster
    start = c.nodes[0].port
    rc: Any = redis.cluster.RedisCluster(host="127.0.0.1", port=start, address_remap=proxied.remap)

    async def aio_client() -> Any:
        return acluster.RedisCluster(host="127.0.0.1", port=start, address_remap=proxied.remap)

    locks = relock.Relock(rc, node_timeout=5.0)
    h = locks.acquire("{fo}", ttl=60)
    assert h is not None
    assert h.fenced("INCR", "{fo}:n") == 1

    async def first() -> tuple[Any, Any, Any]:
        arc = await aio_client()
        alocks = relock.aio.Relock(arc, node_timeout=5.0)
        ah = await alocks.acquire("{fo}:a", ttl=60)
        assert ah is not None
        assert await ah.fenced("INCR", "{fo}:n") == 2  # the slot cache is filled
        return arc, alocks, ah

    loop = asyncio.new_event_loop()
    try:
        arc, alocks, ah = loop.run_until_complete(first())
        master = c.master_of("{fo}")
        replica = c.replica_of(master)
        c.conn(master).execute_command("WAIT", 1, 5000)
        c.failover(replica, master)

        def moved() -> int:
            return int(c.conn(master).info("errorstats").get("errorstat_MOVED", {}).get("count", 0))

        before = moved()
        # Both clients still map the slot to the old master, now a replica: it answers MOVED.
        assert h.fenced("INCR", "{fo}:n") == 3
        assert moved() > before, "the old master answered no MOVED: the case did not happen"
        before = moved()
        assert loop.run_until_complete(ah.fenced("INCR", "{fo}:n")) == 4
        assert moved() > before, "the old master answered no MOVED: the case did not happen"
        assert proxied.counter("{fo}:n") == "4"
        loop.run_until_complete(ah.release())
        loop.run_until_complete(arc.aclose())
    finally:
        loop.close()
    h.release()
    rc.close()


@SHARED_CLUSTER
def test_cluster_a_fenced_write_follows_ask_while_its_slot_migrates_and_runs_once(proxied: ProxiedCluster) -> None:
    """ASK (the key left for the importing master) says the source did not run it: relock
    sends it on there, after ASKING, once; sync and asyncio (a fresh asyncio client, whose
    first command is the fenced write)."""
    c = proxied.cluster
    start = c.nodes[0].port
    rc: Any = redis.cluster.RedisCluster(host="127.0.0.1", port=start, address_remap=proxied.remap)
    locks = relock.Relock(rc, node_timeout=5.0)
    h = locks.acquire("{mg}", ttl=60)
    g = locks.acquire("{mg}:b", ttl=60)
    assert h is not None and g is not None
    assert h.fenced("INCR", "{mg}:n") == 1
    src = c.master_of("{mg}")
    dst = next(n for n in c.nodes if c.role(n) == "master" and n.port != src.port)
    slot = int(c.conn(src).execute_command("CLUSTER", "KEYSLOT", "{mg}"))
    src_id, dst_id = (str(c.conn(n).execute_command("CLUSTER", "MYID")) for n in (src, dst))

    def asks() -> int:
        return int(c.conn(src).info("errorstats").get("errorstat_ASK", {}).get("count", 0))

    c.conn(dst).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    c.conn(src).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    try:
        c.conn(src).execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", "{mg}", "{mg}:b", "{mg}:n")
        before = asks()
        assert h.fenced("INCR", "{mg}:n") == 2
        assert asks() > before, "the source answered no ASK: the case did not happen"

        async def aio() -> None:
            arc: Any = acluster.RedisCluster(host="127.0.0.1", port=start, address_remap=proxied.remap)
            try:
                # The same hold, fenced from an asyncio client (its token is what LOCK.FENCED checks).
                ag = relock.aio.Hold.__new__(relock.aio.Hold)
                ag.__dict__.update({"_client": relock.aio.Relock(arc, node_timeout=5.0), "key": g.key, "token": g.token})
                before = asks()
                assert await ag.fenced("INCR", "{mg}:n") == 3
                assert asks() > before, "the source answered no ASK: the case did not happen"
            finally:
                await arc.aclose()

        asyncio.run(aio())
        at_dst: Any = redis.Redis(port=dst.port, single_connection_client=True, decode_responses=True)
        at_dst.execute_command("ASKING")
        assert at_dst.get("{mg}:n") == "3"  # ran once per call, at the importing master
        at_dst.close()
    finally:
        for n in c.nodes:
            if c.role(n) == "master":
                c.conn(n).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    h.release()
    g.release()
    rc.close()


# --- LOCK.FORCERELEASE: sent once too ----------------------------------------------------------
#
# Run a second time after its reply was lost, a force-release removes whatever hold was taken
# of the key since (an operator's force-release meant for the old holder takes the new holder's
# lock): it is sent as a fenced write is, never by the driver's retries.

#: A force-release of a key on the wire (not redis-py's ``COMMAND GETKEYS LOCK.FORCERELEASE ...``).
FORCE_RELEASE = b"*2\r\n$17\r\nLOCK.FORCERELEASE\r\n"
FORCE_MAY_HAVE_RUN = r"LOCK\.FORCERELEASE .*\(it may have run; it was not sent again\)"


def force_runs(r: Any) -> int:
    """How many times the server ``r`` ran LOCK.FORCERELEASE (its ``commandstats``)."""
    return int(r.info("commandstats").get("cmdstat_LOCK.FORCERELEASE", {}).get("calls", 0))


def test_sync_a_force_release_whose_reply_was_lost_is_not_sent_again(server: Server, proxy: LossProxy) -> None:
    locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=0.5)
    assert locks.acquire("{fr}", ttl=30) is not None
    proxy.arm(FORCE_RELEASE)
    with pytest.raises(relock.ServerError, match=FORCE_MAY_HAVE_RUN):
        locks.force_release("{fr}")
    assert proxy.lost == 1
    assert force_runs(direct(server)) == 1
    assert locks.info("{fr}") is None  # it ran: the hold is gone
    locks.close()


def test_aio_a_force_release_whose_reply_was_lost_is_not_sent_again(server: Server, proxy: LossProxy) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=0.5)
        assert await locks.acquire("{fr}", ttl=30) is not None
        proxy.arm(FORCE_RELEASE)
        with pytest.raises(relock.ServerError, match=FORCE_MAY_HAVE_RUN):
            await locks.force_release("{fr}")
        assert proxy.lost == 1
        assert force_runs(direct(server)) == 1
        await locks.aclose()

    asyncio.run(main())


@SHARED_CLUSTER
def test_sync_cluster_a_force_release_is_sent_once(proxied: ProxiedCluster) -> None:
    """redis-py's cluster client sent it again after the lost connection (its Retry, after
    reading the map again): the second run, had another owner taken the key in between,
    would have removed that owner's hold."""
    c = proxied.cluster
    rc: Any = redis.cluster.RedisCluster(host="127.0.0.1", port=c.nodes[0].port, address_remap=proxied.remap)
    locks = relock.Relock(rc, node_timeout=0.5)
    assert locks.acquire("{sf}", ttl=60) is not None
    p = proxied.proxy_of("{sf}")
    rc.nodes_manager.initialize()
    assert rc.get_node_from_key("{sf}").port == p.port
    master = c.conn(c.master_of("{sf}"))
    runs, lost = force_runs(master), p.lost
    p.arm(FORCE_RELEASE)
    with pytest.raises(relock.ServerError, match=FORCE_MAY_HAVE_RUN):
        locks.force_release("{sf}")
    assert p.lost == lost + 1
    assert force_runs(master) - runs == 1  # redis-py's cluster client re-sent it: 2
    # An answered one is answered as before.
    assert locks.acquire("{sf}", ttl=60) is not None
    assert locks.force_release("{sf}") == 1
    locks.close()
    rc.close()


@SHARED_CLUSTER
def test_aio_cluster_a_force_release_is_sent_once(proxied: ProxiedCluster) -> None:
    async def main() -> None:
        c = proxied.cluster
        rc: Any = acluster.RedisCluster(host="127.0.0.1", port=c.nodes[0].port, address_remap=proxied.remap)
        locks = relock.aio.Relock(rc, node_timeout=0.5)
        assert await locks.acquire("{af}", ttl=60) is not None
        p = proxied.proxy_of("{af}")
        await rc.nodes_manager.initialize()  # as in test_aio_cluster_a_fenced_write_is_sent_once
        assert rc.get_node_from_key("{af}").port == p.port
        master = c.conn(c.master_of("{af}"))
        runs, lost = force_runs(master), p.lost
        p.arm(FORCE_RELEASE)
        with pytest.raises(relock.ServerError, match=FORCE_MAY_HAVE_RUN):
            await locks.force_release("{af}")
        assert p.lost == lost + 1
        assert force_runs(master) - runs == 1
        assert await locks.acquire("{af}", ttl=60) is not None
        assert await locks.force_release("{af}") == 1
        await locks.aclose()
        await rc.aclose()

    asyncio.run(main())
