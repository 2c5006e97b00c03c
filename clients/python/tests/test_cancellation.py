"""Cancellation (asyncio) and interruption (Ctrl-C in the sync client) at the awaits and
steps of a hold: whatever was cut, the server is left with the count the client believes,
and a hold released at the end frees its lock."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis
import redis.asyncio as aredis

import relock
import relock.aio
from helpers import aconnect, connect, direct, eventually, holding, info, until, waiters, yield_to_loop
from servers import LossProxy, Server


def test_aio_a_section_cancelled_while_its_exit_waits_for_the_step_still_steps_out(server: Server, proxy: LossProxy) -> None:
    """Two tasks share a hold; one leaves its nested section while the other's LOCK.REENTER
    is under way (the step is busy) and is cancelled right there. Its LOCK.RELEASE was never
    sent and its count never taken down: the hold's final release took the count from 2 to 1
    and the lock stayed held by nobody for its whole ttl. Must hold: the cut exit still
    steps out (in order), and the final release frees the lock."""

    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=2.0)
        hold = await locks.acquire("k", ttl=20)
        assert hold is not None
        inside, leave = asyncio.Event(), asyncio.Event()

        async def a() -> None:
            async with hold.reenter():
                inside.set()
                await leave.wait()

        async def b() -> None:
            async with hold.reenter() as n:
                assert n == 3

        ta = asyncio.create_task(a())
        await inside.wait()
        proxy.arm(b"LOCK.REENTER", delay=0.5)
        tb = asyncio.create_task(b())
        assert await until(proxy.hit.is_set, 5)  # b has the step, its reply delayed
        leave.set()
        await yield_to_loop(5)  # a reaches its exit and waits for the step there
        ta.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ta
        await tb
        assert await hold.release()
        assert await until(lambda: info(server, "k") is None, 3), info(server, "k")
        await locks.aclose()

    asyncio.run(main())


def test_aio_a_section_cancelled_before_its_entry_was_sent_never_enters(server: Server, proxy: LossProxy) -> None:
    """A reenter cancelled while it waits for the step (another task's entry under way) or for
    late steps kept its step-in task, which entered later anyway (LOCK.REENTER sent, then
    stepped out), and a section queued meanwhile was told that stray count (found by the attack
    on the late-step rule, 2026-12-05). Must hold: an entry not yet sent when its caller was
    cancelled is never sent."""

    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=2.0)
        hold = await locks.acquire("k", ttl=20)
        assert hold is not None
        reenters = lambda: int(direct(server).info("commandstats").get("cmdstat_LOCK.REENTER", {}).get("calls", 0))  # noqa: E731
        before = reenters()
        proxy.arm(b"LOCK.REENTER", delay=0.5)
        entered = asyncio.Event()
        leave = asyncio.Event()

        async def a() -> None:
            async with hold.reenter() as n:
                assert n == 2
                entered.set()
                await leave.wait()

        ta = asyncio.create_task(a())
        assert await until(proxy.hit.is_set, 5)  # a has the step, its reply delayed
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(hold.reenter().__aenter__(), 0.1)  # waits for the step: cut
        await entered.wait()
        await locks.settle()  # the cut entry's task has ended, whatever it did
        assert reenters() - before == 1, "the cut section's entry was sent after its caller left"
        assert int((info(server, "k") or {})["count"]) == 2
        leave.set()
        await ta
        assert await hold.release()
        assert await until(lambda: info(server, "k") is None, 3), info(server, "k")
        await locks.aclose()

    asyncio.run(main())


def test_aio_aclose_while_a_task_is_inside_a_nested_section_frees_the_lock(server: Server) -> None:
    """aclose() (or release()) while another task runs inside a nested section: the release
    took the count from 2 to 1 only, the inner exit then asked for 2 -> 1 (a repeat, nothing
    changed) and the lock was held by nobody for its whole ttl. Must hold: the hold ends
    whole (every count), and the section's exit afterwards changes nothing."""

    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=server.port))
        hold = await locks.acquire("k", ttl=20)
        assert hold is not None
        inside, leave = asyncio.Event(), asyncio.Event()

        async def a() -> None:
            async with hold.reenter():
                inside.set()
                await leave.wait()

        ta = asyncio.create_task(a())
        await inside.wait()
        await locks.aclose()
        assert hold.lost.is_set()
        assert await until(lambda: info(server, "k") is None, 3), info(server, "k")
        leave.set()
        with contextlib.suppress(relock.RelockError):
            await ta
        assert info(server, "k") is None

    asyncio.run(main())


def test_sync_release_while_a_thread_is_inside_a_nested_section_frees_the_lock(server: Server) -> None:
    import threading

    locks = relock.Relock(redis.Redis(port=server.port))
    hold = locks.acquire("k", ttl=20)
    assert hold is not None
    inside, leave = threading.Event(), threading.Event()

    def a() -> None:
        with contextlib.suppress(relock.RelockError):
            with hold.reenter():
                inside.set()
                leave.wait(10)

    t = threading.Thread(target=a)
    t.start()
    assert inside.wait(5)
    hold.release()
    assert eventually(lambda: info(server, "k") is None, 3), info(server, "k")
    leave.set()
    t.join(5)
    assert info(server, "k") is None
    locks.close()


def test_aio_a_reenter_cancelled_under_way_then_a_release_frees_the_lock(server: Server, proxy: LossProxy) -> None:
    """A nested section cancelled while its LOCK.REENTER is under way (the server ran it, the
    reply is late), then the hold released at once: the take-back (RELEASE FROM 2) ran in the
    background beside the release (FROM 1), which could meet count 2 (`ERR hold count is 2,
    not 1`); the take-back then left count 1 and the lock was held by nobody for its ttl (a
    race: tried several times). Must hold: the steps keep their order, the release frees the
    lock."""

    async def main() -> None:
        for i in range(5):
            key = f"k{i}"
            locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=2.0)
            hold = await locks.acquire(key, ttl=20)
            assert hold is not None

            async def a(h: relock.aio.Hold) -> None:
                async with h.reenter():
                    pytest.fail("entered a cancelled section")

            proxy.hit.clear()
            proxy.arm(b"LOCK.REENTER", delay=0.3)
            ta = asyncio.create_task(a(hold))
            assert await until(proxy.hit.is_set, 5)
            ta.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ta
            with contextlib.suppress(relock.RelockError):
                await hold.release()
            assert await until(lambda: info(server, key) is None, 3), (i, info(server, key))
            await locks.aclose()

    asyncio.run(main())


def test_sync_a_reenter_whose_reply_was_lost_then_a_release_frees_the_lock(server: Server, proxy: LossProxy) -> None:
    """The sync client's take-back of a LOCK.REENTER whose reply was lost (RELEASE FROM 2)
    ran in a background thread beside the release that followed at once (FROM 1): the
    release could meet count 2, the take-back then left count 1, and the lock was held by
    nobody for its ttl (a race: tried several times). Must hold: the release frees it."""
    for i in range(5):
        key = f"k{i}"
        locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=2.0)
        hold = locks.acquire(key, ttl=20)
        assert hold is not None
        proxy.arm(b"LOCK.REENTER")
        with pytest.raises(relock.RelockError):
            with hold.reenter():
                pytest.fail("entered a section whose LOCK.REENTER got no reply")
        with contextlib.suppress(relock.RelockError):
            hold.release()
        assert eventually(lambda: info(server, key) is None, 3), (i, info(server, key))
        locks.close()


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_release_that_meets_a_count_it_did_not_expect_still_ends_the_hold(server: Server, flavour: str) -> None:
    """A step the client no longer counted (a sync reenter interrupted by Ctrl-C, its
    take-back still under way in the background) leaves the server one count above the
    client's: the release (FROM 1) met `ERR hold count is 2, not 1`, raised, and the lock
    was held by nobody for its ttl (the renewal had stopped). Must hold: the release ends
    the hold whole, from the count the server has."""
    raw = redis.Redis(port=server.port)
    if flavour == "sync":
        locks = relock.Relock(redis.Redis(port=server.port))
        hold = locks.acquire("k", ttl=20)
        assert hold is not None
        raw.execute_command("LOCK.REENTER", "k", hold.owner, 20000, "FROM", 1)
        assert hold.release()
        locks.close()
    else:

        async def main() -> None:
            alocks = relock.aio.Relock(aredis.Redis(port=server.port))
            ahold = await alocks.acquire("k", ttl=20)
            assert ahold is not None
            raw.execute_command("LOCK.REENTER", "k", ahold.owner, 20000, "FROM", 1)
            assert await ahold.release()
            await alocks.aclose()

        asyncio.run(main())
    assert info(server, "k") is None, info(server, "k")


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_redlock_a_reenter_whose_reply_was_lost_on_a_minority_is_taken_back_there(servers3: list[Server], flavour: str) -> None:
    """Redlock over 3 masters: a LOCK.REENTER won on a quorum whose reply was lost on the
    third master (it ran there) was never taken back; the final release (FROM 1) met count 2
    there, and that master kept the lock for its whole ttl (one fault from unavailable).
    Must hold: after the section and the release, no master holds the lock."""
    p = LossProxy(servers3[2].port)
    try:
        ports = [servers3[0].port, servers3[1].port, p.port]
        if flavour == "sync":
            locks = relock.Relock([redis.Redis(port=port) for port in ports], node_timeout=1.0)
            hold = locks.acquire("k", ttl=20)
            assert hold is not None
            p.arm(b"LOCK.REENTER")
            with hold.reenter() as n:
                assert n == 2
            assert p.lost == 1
            hold.release()
            locks.close()
        else:

            async def main() -> None:
                alocks = relock.aio.Relock([aredis.Redis(port=port) for port in ports], node_timeout=1.0)
                ahold = await alocks.acquire("k", ttl=20)
                assert ahold is not None
                p.arm(b"LOCK.REENTER")
                async with ahold.reenter() as n:
                    assert n == 2
                assert p.lost == 1
                await ahold.release()
                await alocks.settle()
                await alocks.aclose()

            asyncio.run(main())
        assert eventually(lambda: all(info(s, "k") is None for s in servers3), 3)
        assert [info(s, "k") for s in servers3] == [None, None, None]
    finally:
        p.close()


def test_sync_a_release_interrupted_while_another_threads_step_is_under_way_still_frees_the_lock(
    server: Server, proxy: LossProxy
) -> None:
    """Ctrl-C lands in release() while it waits for another thread's step (a nested section's
    LOCK.REENTER whose reply is late): the hold was marked released and nothing was sent, and
    the section's exit then sent nothing either: the lock was held by nobody for its ttl.
    Must hold: the whole release goes on in the background, in the order of steps."""
    import signal
    import threading

    locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=2.0)
    hold = locks.acquire("k", ttl=20)
    assert hold is not None
    proxy.arm(b"LOCK.REENTER", delay=0.5)

    def a() -> None:
        with contextlib.suppress(relock.RelockError):
            with hold.reenter():
                pass

    t = threading.Thread(target=a)
    t.start()
    assert proxy.hit.wait(5)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(KeyboardInterrupt):
            hold.release()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    t.join(5)
    assert eventually(lambda: info(server, "k") is None, 3), info(server, "k")
    locks.close()


def test_aio_a_release_cancelled_while_another_tasks_step_is_under_way_still_frees_the_lock(
    server: Server, proxy: LossProxy
) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=2.0)
        hold = await locks.acquire("k", ttl=20)
        assert hold is not None
        proxy.arm(b"LOCK.REENTER", delay=0.5)

        async def a() -> None:
            with contextlib.suppress(relock.RelockError):
                async with hold.reenter():
                    pass

        ta = asyncio.create_task(a())
        assert await until(proxy.hit.is_set, 5)
        tr = asyncio.create_task(hold.release())
        await yield_to_loop(5)
        tr.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tr
        await ta
        await locks.settle()
        assert await until(lambda: info(server, "k") is None, 3), info(server, "k")
        await locks.aclose()

    asyncio.run(main())


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_aio_cancelled_redlock_wait_leaves_no_waiter(servers3: list[Server]) -> None:
    """Attack: the same over 3 masters (Redlock). Must hold: no master keeps the cancelled wait,
    and once the holder releases, the key is free."""

    async def main() -> None:
        # A 2 s node timeout: the test is about cancellation, and the last acquire (wait=0) got
        # no quorum within the default 0.1 s on a loaded machine (a fresh run, 2026-12-03).
        locks = relock.aio.Relock([aconnect(s) for s in servers3], node_timeout=2.0)
        holder = await locks.acquire("w", ttl=5)
        assert holder is not None
        t = asyncio.ensure_future(locks.acquire("w", ttl=5))
        assert await until(lambda: [waiters(s, "w") for s in servers3] == [1, 1, 1], 5)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert await until(lambda: [waiters(s, "w") for s in servers3] == [0, 0, 0], 5), "a master kept the wait"
        await holder.release()

        # A release without a quorum within the node timeout (a busy machine) goes on in the
        # background: the holder's hold may stand a little longer. No other owner's may.
        def others() -> list[str]:
            got = [info(s, "w") for s in servers3]
            return [str(i["owner"]) for i in got if i is not None and str(i["owner"]) != holder.owner]

        assert await until(lambda: all(i is None for i in (info(s, "w") for s in servers3)) or others(), 10)
        assert others() == [], f"held by a cancelled waiter: {others()}"
        again = await locks.acquire("w", ttl=5, wait=0)
        assert again is not None, f"free, then refused: {holding(servers3, 'w')}"
        await again.release()

    asyncio.run(main())


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_aio_cancelled_body_releases(server: Server) -> None:
    """Attack: a task holding a lock in ``async with`` is cancelled (wait_for timeout). Must
    hold: released on the way out."""

    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))

        async def body() -> None:
            async with locks.lock("c", ttl=5):
                await asyncio.Event().wait()  # runs until cancelled

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(body(), 0.3)
        await locks.settle()
        assert holding([server], "c") == [False]

    asyncio.run(main())



class _StepConn:
    """A connection whose replies the test hands over one at a time (``reply``), for cutting a
    command at an exact step; nothing goes to a server."""

    def __init__(self) -> None:
        self.replies: asyncio.Queue[asyncio.Future[object]] = asyncio.Queue()
        self.closed = asyncio.Event()
        self.is_connected = True

    def pack_commands(self, commands: object) -> bytes:
        return b""

    async def send_packed_command(self, packed: object, check_health: bool = False) -> None:
        return None

    async def read_response(self) -> object:
        f: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        await self.replies.put(f)
        return await f

    async def disconnect(self, nowait: bool = False) -> None:
        self.is_connected = False
        self.closed.set()


def test_aio_a_wait_cancelled_as_its_client_id_arrives_is_cut(server: Server) -> None:
    """Found under load (test_aio_cancelled_redlock_wait_leaves_no_waiter: the cancelled wait
    stayed queued on one master of three): the blocked ``LOCK.WAIT`` is sent together with
    ``CLIENT ID``, and a cancellation that arrived in the same step as ``CLIENT ID``'s reply
    was lost in ``asyncio.wait_for`` (Python before 3.12), so the task went on waiting on the
    server with nobody left to cut it. Staged exactly here: the reply and the cancellation in
    one step. Must hold: the task ends cancelled and its connection is closed (which takes the
    wait out of the server's queue)."""

    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        node = locks._servers[0]
        conn = _StepConn()

        async def checkout() -> _StepConn:
            return conn

        node._checkout = checkout  # type: ignore[method-assign]
        task = asyncio.ensure_future(node.call(["LOCK.WAIT", "k", "o", 1000, 0], None))
        client_id = await asyncio.wait_for(conn.replies.get(), 5)
        client_id.set_result(7)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        assert done, "the cancelled wait went on waiting"
        assert task.cancelled()
        assert conn.closed.is_set(), "the waiting connection was left open"
        await locks.aclose()

    asyncio.run(main())
