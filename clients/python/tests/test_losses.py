"""Renewal and loss: a hold renewed past its ttl, a loss signalled within validity with its
reason and who caused it (the journal), and what ends a hold: a stall, a blocked event loop,
a stopped or restarted server, dropped connections, a refused renewal."""

from __future__ import annotations

import asyncio
import time

import pytest

import relock
import relock.aio
from relock import _core as core
from helpers import aconnect, connect, info_field, wait_out_ttl, wait_out_ttl_async, yield_to_loop
from servers import Server


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_renewal_keeps_a_hold_past_its_ttl(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    # A ttl of 1.2 s: a renewal every 0.4 s, and a thread that a busy machine leaves unscheduled
    # for most of a second does not lose the hold.
    with locks.lock("job", ttl=1.2) as h:
        wait_out_ttl(3.0, during=h.check)
        info = locks.info("job")
        assert info is not None and info.token == h.token
        assert info_field(r, "renewed_total") >= 2
    renewed = info_field(r, "renewed_total")
    wait_out_ttl(0.5)  # longer than a renewal's interval (ttl/3)
    assert info_field(r, "renewed_total") == renewed, "renewal stopped at release"


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_expiry_while_the_process_is_stalled(server: Server) -> None:
    """Work that holds the GIL longer than the ttl: the renewal thread cannot run, and the
    hold reads as lost the moment the work ends, before any thread got to run."""
    import ctypes

    locks = relock.Relock(connect(server))
    with locks.lock("k", ttl=0.3) as h:
        ctypes.PyDLL(None).usleep(600_000)  # holds the GIL for 0.6 s: the stall under test (not a wait)
        assert h.lost.is_set()
        with pytest.raises(relock.LockLost, match="stall"):
            h.check()


# From test_aio.py (the asyncio client against real servers).
def test_a_blocked_event_loop_reads_as_lost(server: Server) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        async with locks.lock("k", ttl=0.3) as h:
            wait_out_ttl(0.6)  # blocks the loop longer than the ttl
            assert h.lost.is_set()
            with pytest.raises(relock.LockLost, match="event loop"):
                h.check()
        await locks.settle()

    asyncio.run(main())


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_aio_blocked_loop_wakes_lost_waiters_at_once(server: Server) -> None:
    """Attack: time.sleep (2x the ttl) inside ``async with``; a task waits on ``hold.lost``.
    Must hold: right after the block, ``lost`` reads set and the waiting task wakes before the
    body awaits anything long."""

    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        async with locks.lock("b", ttl=0.3) as h:
            waiter = asyncio.ensure_future(h.lost.wait())
            await yield_to_loop()
            wait_out_ttl(0.6)  # blocks the loop, twice the ttl
            assert h.lost.is_set()
            await asyncio.wait_for(waiter, 0.2)
        await locks.settle()

    asyncio.run(main())


# From test_more.py (what the module added after the first packages).
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


# From test_more.py (what the module added after the first packages).
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


# From test_more.py (what the module added after the first packages).
def test_loss_with_an_empty_journal_says_it_cannot_say_why(server: Server) -> None:
    r = connect(server)
    r.config_set("relock.log-max-len", 0)
    locks = relock.Relock(r)
    with locks.lock("k", ttl=2) as h:
        r.execute_command("LOCK.FORCERELEASE", "k")
        assert h.lost.wait(10)
        assert h.cause is None and h.who is None and "cannot say why" in (h.reason or "")


# From test_more.py (what the module added after the first packages).
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


# From test_more.py (what the module added after the first packages).
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


# From test_more.py (what the module added after the first packages).
def test_downgrade_of_a_lost_hold_says_why(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    h = locks.acquire("doc", ttl=5)
    assert h is not None
    r.execute_command("LOCK.FORCERELEASE", "doc")
    with pytest.raises(relock.LockLost) as e:
        h.downgrade()
    assert e.value.cause == "forcereleased"


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_connection_dropped_mid_renewal(server: Server) -> None:
    """Every connection is dropped every 250 ms for 3 s; the 1.2 s hold is renewed across the
    drops (each renewal that finds its connection closed opens another)."""
    r = connect(server)
    admin = connect(server)
    locks = relock.Relock(r)
    with locks.lock("k", ttl=1.2) as h:
        first = h.valid_until
        wait_out_ttl(3.0, during=lambda: admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"), every=0.25)
        h.check()  # reconnected and renewed
        assert h.valid_until > first + 1.5, "renewed across the drops"
        info = locks.info("k")
        assert info is not None and info.owner == h.owner


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_aio_connection_dropped_mid_renewal(server: Server) -> None:
    """Attack: every connection is killed every 250 ms for 3 s under a 1.2 s asyncio hold.
    Must hold: renewed across the drops, still the owner."""
    admin = connect(server)

    async def main() -> None:
        locks = relock.aio.Relock(aconnect(server))
        async with locks.lock("k", ttl=1.2) as h:
            first = h.valid_until
            await wait_out_ttl_async(
                3.0, during=lambda: admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"), every=0.25
            )
            h.check()
            assert h.valid_until > first + 1.5
        await locks.settle()

    asyncio.run(main())


# From test_sync.py (the sync client: the behaviour cases of relock-client).
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
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

