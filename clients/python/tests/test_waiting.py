"""Waiting and exclusion on one server: threads and tasks sharing a client never overlap, waits
are first in first out, handed over, and queued once."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

import relock
import relock.aio
from helpers import aconnect, connect, eventually, info_field, until, wait_out_ttl, wait_out_ttl_async
from servers import Server


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_aio.py (the asyncio client against real servers).
def test_tasks_exclude_each_other_and_wait_in_order(server: Server) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        first = await locks.acquire("q", ttl=10)
        assert first is not None
        assert await locks.acquire("q", wait=0) is None
        order: list[tuple[str, int]] = []

        async def worker(name: str) -> None:
            async with locks.lock("q", ttl=10, wait=30) as h:
                order.append((name, h.token))

        tasks = []
        for i, name in enumerate(["w1", "w2", "w3"]):
            tasks.append(asyncio.create_task(worker(name)))

            async def queued(n: int = i + 1) -> bool:
                info = await locks.info("q")
                return info is not None and info.waiters == n

            assert await until(queued, 20, every=0.01)
        await first.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert [n for n, _ in order] == ["w1", "w2", "w3"]
        assert [t for _, t in order] == sorted(t for _, t in order)
        with pytest.raises(relock.NotAcquired):
            async with locks.lock("q", wait=0):
                async with locks.lock("q", wait=0.1):
                    pass
        await locks.settle()

    asyncio.run(main())


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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
    wait_out_ttl(1.0)  # ten node timeouts: a wait sent again after each would queue again
    assert info_field(r, "contended_total") == 1, "queued once"
    first.release()
    waiter.join(10)
    assert got and got[0] is not None and got[0].token > first.token
    assert info_field(r, "granted_total") == 1
    got[0].release()


# From test_aio.py (the asyncio client against real servers).
def test_aio_a_wait_without_limit_queues_once(server: Server) -> None:
    async def main() -> None:
        r = aconnect(server)
        locks = relock.aio.Relock(r)


        async def warm() -> bool:
            with contextlib.suppress(relock.ServerError):
                return await locks.info("warm") is None
            return False

        # A connection open first: each call, connecting included, has the node timeout, which
        # a first connection on a loaded machine (late in the suite) may take longer than.
        assert await until(warm, 10, every=0.05)
        first = await locks.acquire("q", ttl=10, wait=0)
        assert first is not None
        waiter = asyncio.create_task(locks.acquire("q", ttl=10))


        async def queued() -> bool:
            return bool((await r.info("relock"))["relock_waiters"] == 1)

        assert await until(queued, 10, every=0.01)
        await wait_out_ttl_async(1.0)  # ten node timeouts: a wait sent again after each would queue again
        assert (await r.info("relock"))["relock_contended_total"] == 1, "queued once"
        await first.release()
        second = await asyncio.wait_for(waiter, 10)
        assert second is not None and second.token > first.token
        await second.release()
        await locks.settle()
        await r.aclose()

    asyncio.run(main())


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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
                    time.sleep(0.001)  # the work under the lock (not a wait): others try meanwhile
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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
                    await asyncio.sleep(0.001)  # the work under the lock (not a wait): others try meanwhile
                    h.check()
                    inside[0] -= 1

        await asyncio.gather(*[worker() for _ in range(16)])
        await locks.settle()
        assert overlaps[0] == 0 and len(tokens) == 80 and tokens == sorted(tokens)

    asyncio.run(run(relock.aio.Relock(aconnect(servers3[0]))))
    asyncio.run(run(relock.aio.Relock([aconnect(s) for s in servers3])))

