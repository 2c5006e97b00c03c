"""Redlock against real servers (three masters): quorums, paused masters, fencing tokens, the
restart grace, and a paused master costing a round no more than its deadline."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

import relock
import relock.aio
from helpers import aconnect, connect, eventually, holding, until, wait_out_ttl, wait_out_ttl_async, waiters, within
from servers import Server

#: Three masters answering within the 0.1 s default node_timeout, round after round, while
#: threads contend: under pytest-xdist these run while no other test does (conftest.py's
#: ``alone``), as the other workers' servers and clients kept them from answering in time.
pytestmark = pytest.mark.alone


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_redlock_with_a_paused_master(servers3: list[Server]) -> None:
    locks = relock.Relock([connect(s, socket_timeout=5) for s in servers3])
    assert locks.quorum == 2
    servers3[2].pause()
    try:
        started = time.monotonic()
        with locks.lock("rl", ttl=1.0) as h:
            assert time.monotonic() - started < 5
            assert set(h.tokens) <= set(locks.servers[:2]) and len(h.tokens) == 2
            wait_out_ttl(2.5, during=h.check)  # renewed by the two that answer
            # A second master stops: no quorum can renew, and the loss comes in time.
            servers3[1].pause()
            assert h.lost.wait(5)
            assert time.monotonic() <= h.valid_until + 0.05
    finally:
        for s in servers3:
            s.resume()


# From test_aio.py (the asyncio client against real servers).
def test_shared_semaphore_and_redlock(servers3: list[Server]) -> None:
    async def main() -> None:
        one = relock.aio.Relock(aconnect(servers3[0]))
        a = await one.acquire("s", limit=1)
        assert a is not None and await one.acquire("s", limit=1, wait=0) is None
        await a.release()
        many = relock.aio.Relock([aconnect(s) for s in servers3])
        with pytest.raises(relock.InvalidArgument):
            await many.acquire("s2", limit=2)
        servers3[2].pause()
        try:
            async with many.lock("rl", ttl=1.0, wait=5) as h:
                await wait_out_ttl_async(2.0)
                h.check()
        finally:
            servers3[2].resume()
        await many.settle()
        await one.settle()

    asyncio.run(main())


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_redlock_wait_hands_over(servers3: list[Server]) -> None:
    locks = relock.Relock([connect(s) for s in servers3])
    first = locks.acquire("rl", ttl=10, wait=0)
    assert first is not None and len(first.tokens) >= 2
    threading.Timer(0.3, first.release).start()
    with locks.lock("rl", ttl=10, wait=10) as h:
        assert all(h.tokens[s] > first.tokens[s] for s in h.tokens if s in first.tokens)


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_a_paused_master_costs_a_round_its_deadline_and_no_more(servers3: list[Server]) -> None:
    """Clients without a socket_timeout (redis-py's default): a stopped master still accepts
    connections (its kernel does) but never answers the handshake. Each round gives it
    node_timeout, connecting included, and no thread of the client stays stuck on it, so
    round after round the two others carry on. node_timeout is 1 s, not the default 0.1 s: at
    a load average of 14 a live master's release answered after 0.1 s (seen once in `make
    test`), and after 0.5 s with a core busy on a slow machine (run K, 2026-12-04), and the
    release, confirmed by one master of three, said False; a round is bounded by two deadlines
    (the acquire's and the release's wait for the paused master), under the 3.5 s asserted."""
    locks = relock.Relock([connect(s) for s in servers3], node_timeout=1.0)

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
                assert within(10, h.release), i
            # An acquire and a release each wait for every master: the paused one costs each
            # node_timeout.
            assert time.monotonic() - started < 3.5, (i, time.monotonic() - started)
        # Each round needs both others within 0.1 s, which a loaded machine sometimes misses;
        # a client with threads stuck on the paused master would grant none after round 13.
        assert granted >= 20, granted
        opening = [t for t in threading.enumerate() if t.name == f"relock connect {locks.servers[2]}"]
        assert len(opening) <= 4, "a paused master holds at most four threads, opening connections"
    finally:
        servers3[2].resume()


# From test_aio.py (the asyncio client against real servers).
def test_aio_a_paused_master_costs_a_round_its_deadline_and_no_more(servers3: list[Server]) -> None:
    """Clients without a socket_timeout: a stopped master accepts connections but never
    answers; every call to it is bounded by node_timeout (connecting included), so round
    after round the two others carry on."""

    async def main() -> None:
        clients = [aconnect(s) for s in servers3]
        # node_timeout 1 s, as the sync test's (a loaded machine's late release).
        locks = relock.aio.Relock(clients, node_timeout=1.0)
        async def warm() -> bool:
            with contextlib.suppress(relock.ServerError):
                return await locks.info_each("warm") == [None] * 3
            return False

        # A connection open to every master (a loaded machine may take a while).
        assert await until(warm, 20, every=0.1)
        servers3[2].pause()
        try:
            granted = 0
            for i in range(30):
                started = time.monotonic()
                h = await asyncio.wait_for(locks.acquire(f"k{i}", ttl=5, wait=0), 10)
                if h is not None:
                    granted += 1
                    assert set(h.tokens) == set(locks.servers[:2]), i
                    assert await asyncio.wait_for(h.release(), 10), i
                assert time.monotonic() - started < 3.5, (i, time.monotonic() - started)
            # Each round needs both others within 0.1 s, which a loaded machine sometimes misses.
            assert granted >= 20, granted
        finally:
            servers3[2].resume()
        await locks.settle()
        for c in clients:
            await c.aclose()

    asyncio.run(main())


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_a_waited_redlock_hold_survives_one_paused_master(servers3: list[Server]) -> None:
    """Attack: holds taken with ``wait`` over 3 healthy masters (uncontended), then one master
    holding one of them stops (SIGSTOP). Must hold (docs: "a paused Redlock master: the other
    two carry acquisitions and renewals"). A wait won by two masters cuts the third's wait and
    asks it once more (the top-up), so no hold is left on a bare quorum, which one paused
    master would end; the hold is then renewed by the other two.

    node_timeout is 0.5 s, not the default 0.1 s: at a load average of 14 the top-up's answer
    came after 0.1 s, a hold stayed on two masters, and pausing one of them ended it (seen once
    in `make test` with a core kept busy). The test used to pause a master only when it found
    such a hold (and then failed); now it asserts there is none and always pauses one."""
    locks = relock.Relock([connect(s) for s in servers3], node_timeout=0.5)
    holds = [locks.acquire(f"w{i}", ttl=1.2, wait=2) for i in range(30)]
    # The waits cut once two had granted have left every queue: no late grant can land.
    assert eventually(lambda: all(waiters(s, f"w{i}") == 0 for s in servers3 for i in range(30)), 5)
    granted = [h for h in holds if h is not None]
    assert len(granted) >= 20, f"{len(granted)} of 30 granted"
    bare = [h.key for h in granted if sum(holding(servers3, h.key)) < 3]
    assert not bare, f"holds left on a bare quorum after the top-up: {bare}"
    kept = granted[0]
    for other in granted[1:]:
        other.release()
    stop = servers3[0]
    stop.pause()
    try:
        lost = kept.lost.wait(2.0)
    finally:
        stop.resume()
    assert not lost, f"one paused master ended {kept!r}: {kept.reason}"


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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


# From test_more.py (what the module added after the first packages).
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



def test_a_renewal_answered_nil_fails_check_before_the_reason_is_in(servers3: list[Server]) -> None:
    """Found in the Java review (2026-12-02, finding 7, shared with Python): a renewal the
    quorum answered nil (the lock forcereleased) was acted on only after LOCK.HISTORY asked the
    servers why, a node timeout for a stopped one first in line; all that time check() passed
    although the client knew the key was taken. It raises from the nil; ``lost`` is set with
    the reason once it is in."""
    admins = [connect(s) for s in servers3]
    locks = relock.Relock([connect(s, socket_timeout=30) for s in servers3], node_timeout=2.0)
    servers3[0].pause()  # the journals are asked in order: the stopped master first
    try:
        # A renewal round waits for the stopped master (its node timeout): the lease outlasts it.
        h = locks.acquire("nil", ttl=10, wait=0)
        assert h is not None
        for a in admins[1:]:
            a.execute_command("LOCK.FORCERELEASE", "nil")
        first: list[tuple[relock.LockLost, bool]] = []

        def raised() -> bool:
            try:
                h.check()
            except relock.LockLost as e:
                first.append((e, h.lost.is_set()))
                return True
            return False

        assert eventually(raised, 20, 0.001), "the nil renewal was never seen"
        e, reason_in = first[0]
        assert not reason_in, "the reason was in when check() first raised"
        assert "LOCK.RENEW answered nil" in str(e)
        assert h.lost.wait(20)
        assert h.loss is not None and h.loss.cause == "forcereleased", h.reason
    finally:
        servers3[0].resume()
        locks.close()
