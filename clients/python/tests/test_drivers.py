"""Round 4 (issue 29): commands a driver re-sends, renewal races, losses never signalled,
give-backs never sent, waits that hang or lose their place, errors retried for ever. Each
test stages one break (a lost reply is a proxy that resets a connection between a command
and its reply) and says what must hold."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import relock
import relock.aio
from helpers import direct, eventually, info, kill_relock_connections, until, wait_out_ttl, wait_out_ttl_async, waiters
from servers import LossProxy, Server, free_port


# --- 1. a re-sent release -------------------------------------------------------------------


def test_aio_a_lost_reply_to_an_inner_release_never_frees_the_outer_hold(server: Server, proxy: LossProxy) -> None:
    """redis-py's default Retry re-sends a LOCK.RELEASE whose reply was lost: the inner
    section's release ran twice (count 2 -> 0) and the outer hold was gone while it read
    valid. Must hold: after the inner section, the server still has the outer hold (count 1)."""

    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=1.0)
        async with locks.lock("k", ttl=10) as hold:
            async with hold.reenter() as n:
                assert n == 2
                proxy.arm(b"LOCK.RELEASE")
            assert proxy.lost == 1
            got = info(server, "k")
            assert got is not None and got["owner"] == hold.owner and int(got["count"]) == 1, got
            hold.check()
        await locks.aclose()

    asyncio.run(main())


def test_sync_a_lost_reply_to_an_inner_release_never_frees_the_outer_hold(server: Server, proxy: LossProxy) -> None:
    locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=1.0)
    with locks.lock("k", ttl=10) as hold:
        with hold.reenter() as n:
            assert n == 2
            proxy.arm(b"LOCK.RELEASE")
        assert proxy.lost == 1
        got = info(server, "k")
        assert got is not None and got["owner"] == hold.owner and int(got["count"]) == 1, got
        hold.check()


# --- 2. a shorter renewal racing the background one -----------------------------------------


def test_sync_a_shorter_renewal_is_applied_in_the_servers_order(server: Server, proxy: LossProxy) -> None:
    """The background renewal (3 s) reaches the server first, its reply comes late; an
    explicit renew(0.5) runs meanwhile. The server has 0.5 s; the client must never think
    it has more."""
    locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=2.0)
    hold = locks.acquire("k", ttl=3)
    assert hold is not None
    try:
        proxy.arm(b"3000", delay=0.4)
        assert proxy.hit.wait(20), "the background renewal never went"
        hold.renew(0.5)
        # The delayed reply of the background renewal came, and that renewal ended.
        assert eventually(lambda: proxy.delivered.is_set() and not hold._renewing, 5)
        left = hold.valid_until - time.monotonic()
        assert left <= 0.5, f"the client thinks {left:.2f} s are left, the server gave 0.5 s"
    finally:
        hold.release()


def test_aio_a_shorter_renewal_is_applied_in_the_servers_order(server: Server, proxy: LossProxy) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=2.0)
        hold = await locks.acquire("k", ttl=3)
        assert hold is not None
        try:
            proxy.arm(b"3000", delay=0.4)
            assert await until(proxy.hit.is_set, 20), "the armed command never went"
            await hold.renew(0.5)
            # The delayed reply of the background renewal came, and that renewal ended.
            assert await until(lambda: proxy.delivered.is_set() and not hold._renewing, 5)
            left = hold.valid_until - time.monotonic()
            assert left <= 0.5, f"the client thinks {left:.2f} s are left, the server gave 0.5 s"
        finally:
            await hold.release()
            await locks.aclose()

    asyncio.run(main())


# --- 3. aclose under a running body ---------------------------------------------------------


def test_aio_aclose_signals_the_holds_it_releases(server: Server) -> None:
    """aclose() released holds under running bodies and left hold.lost clear: another owner
    acquired while the body read the hold as valid."""

    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=server.port))
        hold = await locks.acquire("k", ttl=10)
        assert hold is not None
        await locks.aclose()
        assert hold.lost.is_set() and not hold.is_valid
        assert hold.reason is not None and "aclose" in hold.reason
        with pytest.raises(relock.LockLost):
            hold.check()
        assert info(server, "k") is None

    asyncio.run(main())


# --- leaks ----------------------------------------------------------------------------------


def test_sync_a_release_during_a_stall_is_sent_once_the_server_answers(server: Server) -> None:
    """A release made while the server stalled 0.6 s (no connection could open) was tried
    twice within 0.3 s and given up: the lock stayed held for its whole ttl by nobody. Must
    hold: it is released soon after the stall, well within the ttl."""
    locks = relock.Relock(redis.Redis(port=server.port))
    hold = locks.acquire("k", ttl=20)
    assert hold is not None
    kill_relock_connections(server)
    server.pause()
    try:
        assert hold.release() is False
        wait_out_ttl(0.6)  # the stall
    finally:
        server.resume()
    assert eventually(lambda: info(server, "k") is None, 5), "the release was never sent"


def test_aio_a_release_during_a_stall_is_sent_once_the_server_answers(server: Server) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=server.port))
        hold = await locks.acquire("k", ttl=20)
        assert hold is not None
        kill_relock_connections(server)
        server.pause()
        try:
            assert await hold.release() is False
            await wait_out_ttl_async(0.6)  # the stall
        finally:
            server.resume()
        assert await until(lambda: info(server, "k") is None, 5), "the release was never sent"
        await locks.aclose()

    asyncio.run(main())


def test_aio_a_cancel_right_after_a_late_grant_gives_it_back(server: Server) -> None:
    """A wait granted late (after a long wait: the client measures the validity with a
    LOCK.RENEW) cancelled during that renewal: the grant was never given back."""

    async def main() -> None:
        other = relock.aio.Relock(aredis.Redis(port=server.port))
        first = await other.acquire("k", ttl=3)
        assert first is not None
        proxy = LossProxy(server.port)
        try:
            locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=2.0)
            proxy.arm(b"LOCK.RENEW", delay=1.0)
            task = asyncio.get_running_loop().create_task(locks.acquire("k", ttl=3))
            assert await until(lambda: waiters(server, "k") == 1, 10)
            await wait_out_ttl_async(1.5)  # the grant, at release, comes late (under 2/3 of the ttl left)
            await first.release()
            assert await until(proxy.hit.is_set, 10), (
                "no renewal after the late grant",
                info(server, "k"),
                task.done() and (task.exception() or task.result()),
            )
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert await until(lambda: info(server, "k") is None, 2.5), "the late grant was kept by nobody"
            await locks.aclose()
        finally:
            proxy.close()
        await other.aclose()

    asyncio.run(main())


def test_aio_a_program_that_exits_holding_releases(server: Server) -> None:
    """docs/python.md promises release at exit; a relock.aio program that returned from
    asyncio.run() with a hold left it held for its ttl."""
    import subprocess
    import sys

    code = (
        "import asyncio, redis.asyncio as aredis, relock.aio\n"
        "async def main():\n"
        f"    locks = relock.aio.Relock(aredis.Redis(port={server.port}))\n"
        "    global hold\n"
        "    hold = await locks.acquire('k', ttl=60)\n"
        "    print('held', flush=True)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert "held" in out.stdout, out.stdout + out.stderr
    assert info(server, "k") is None, "the hold outlived its program"


# --- errors that retrying cannot fix --------------------------------------------------------


@pytest.mark.parametrize("key", [None, ("a", "b"), 42])
def test_a_key_that_is_not_a_str_is_refused_at_once(server: Server, key: Any) -> None:
    locks = relock.Relock(redis.Redis(port=server.port))
    start = time.monotonic()
    with pytest.raises(relock.InvalidArgument):
        locks.acquire(key, wait=3)
    assert time.monotonic() - start < 1

    async def main() -> None:
        al = relock.aio.Relock(aredis.Redis(port=server.port))
        with pytest.raises(relock.InvalidArgument):
            await al.acquire(key, wait=3)

    asyncio.run(main())


class MovedServer:
    """A fake cluster node: answers every command with MOVED."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = int(self.listener.getsockname()[1])
        self.commands = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        buf = b""
        with c:
            while True:
                try:
                    data = c.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                # Count whole commands (arrays of bulk strings), answer each.
                while True:
                    n = self._command_length(buf)
                    if n is None:
                        break
                    buf = buf[n:]
                    self.commands += 1
                    c.sendall(b"-MOVED 3999 127.0.0.1:1\r\n")

    @staticmethod
    def _command_length(buf: bytes) -> int | None:
        if not buf.startswith(b"*"):
            return None
        end = buf.find(b"\r\n")
        if end < 0:
            return None
        pos = end + 2
        for _ in range(int(buf[1:end])):
            e = buf.find(b"\r\n", pos)
            if e < 0:
                return None
            size = int(buf[pos + 1 : e])
            pos = e + 2 + size + 2
            if pos > len(buf):
                return None
        return pos

    def close(self) -> None:
        self.listener.close()


def test_moved_from_a_cluster_node_is_a_permanent_error() -> None:
    """A plain client pointed at a cluster node got MOVED for ever, counted transient: an
    endless retry. Must hold: a clear, non-retryable error at once."""
    node = MovedServer()
    try:
        locks = relock.Relock(redis.Redis(port=node.port, protocol=2))
        start = time.monotonic()
        with pytest.raises(relock.ServerError) as got:
            locks.acquire("k", wait=None)
        assert time.monotonic() - start < 2
        assert "RedisCluster" in str(got.value) and not got.value.retryable

        async def main() -> None:
            al = relock.aio.Relock(aredis.Redis(port=node.port, protocol=2))
            with pytest.raises(relock.ServerError):
                await asyncio.wait_for(al.acquire("k", wait=None), 5)

        asyncio.run(main())
    finally:
        node.close()


# --- stuck or unfair ------------------------------------------------------------------------


def test_sync_a_wait_on_a_silently_dead_connection_ends(server: Server) -> None:
    """A wait without limit whose connection died without a word (the server dropped it, no
    FIN reached the client) waited for ever. Must hold: the client notices (CLIENT LIST ID,
    as lockctl does), waits again, and gets the lock once it is free."""
    other = relock.Relock(redis.Redis(port=server.port))
    first = other.acquire("k", ttl=30)
    assert first is not None
    proxy = LossProxy(server.port)
    got: list[Any] = []
    try:
        locks = relock.Relock(redis.Redis(port=proxy.port))
        t = threading.Thread(target=lambda: got.append(locks.acquire("k", ttl=5)), daemon=True)
        t.start()
        assert eventually(lambda: waiters(server, "k") == 1, 10)
        proxy.sever_silently()
        assert eventually(lambda: waiters(server, "k") == 0, 5)
        proxy.silent = False  # new connections go through again
        first.release()
        t.join(10)
        assert got and got[0] is not None, "the wait never noticed its connection was dead"
        got[0].release()
    finally:
        proxy.close()


def test_aio_a_wait_on_a_silently_dead_connection_ends(server: Server) -> None:
    async def main() -> None:
        other = relock.aio.Relock(aredis.Redis(port=server.port))
        first = await other.acquire("k", ttl=30)
        assert first is not None
        proxy = LossProxy(server.port)
        try:
            # No socket timeout (redis-py 8's 5 s would cut the wait and hide the break).
            locks = relock.aio.Relock(aredis.Redis(port=proxy.port, socket_timeout=None))
            task = asyncio.get_running_loop().create_task(locks.acquire("k", ttl=5))
            assert await until(lambda: waiters(server, "k") == 1, 10)
            proxy.sever_silently()
            assert await until(lambda: waiters(server, "k") == 0, 5)
            proxy.silent = False
            await first.release()
            hold = await asyncio.wait_for(task, 10)
            assert hold is not None
            await hold.release()
            await locks.aclose()
        finally:
            proxy.close()
        await other.aclose()

    asyncio.run(main())


def test_aio_a_wait_keeps_its_place_past_the_drivers_socket_timeout(server: Server) -> None:
    """redis-py 8's socket_timeout (5 s by default; 0.3 s here) cut a blocked LOCK.WAIT and
    its Retry sent it again, at the back of the queue. Must hold: the first waiter gets the
    lock first."""

    async def main() -> None:
        plain = relock.aio.Relock(aredis.Redis(port=server.port))
        first = await plain.acquire("k", ttl=30)
        assert first is not None
        locks = relock.aio.Relock(aredis.Redis(port=server.port, socket_timeout=0.3))
        mine = asyncio.get_running_loop().create_task(locks.acquire("k", ttl=5))
        assert await until(lambda: waiters(server, "k") == 1, 10)
        theirs = asyncio.get_running_loop().create_task(plain.acquire("k", ttl=5))
        assert await until(lambda: waiters(server, "k") == 2, 10)
        await wait_out_ttl_async(1.0)  # several socket timeouts
        await first.release()
        done, _ = await asyncio.wait([mine, theirs], return_when=asyncio.FIRST_COMPLETED, timeout=10)
        assert mine in done, "the first waiter lost its place"
        h = mine.result()
        assert h is not None
        await h.release()
        h2 = await asyncio.wait_for(theirs, 10)
        assert h2 is not None
        await h2.release()
        await locks.aclose()
        await plain.aclose()

    asyncio.run(main())


def test_sync_a_wait_keeps_its_place_past_the_drivers_socket_timeout(server: Server) -> None:
    plain = relock.Relock(redis.Redis(port=server.port))
    first = plain.acquire("k", ttl=30)
    assert first is not None
    locks = relock.Relock(redis.Redis(port=server.port, socket_timeout=0.3))
    order: list[str] = []

    def take(c: relock.Relock, name: str) -> None:
        h = c.acquire("k", ttl=5)
        assert h is not None
        order.append(name)
        h.release()

    t1 = threading.Thread(target=take, args=(locks, "mine"), daemon=True)
    t1.start()
    assert eventually(lambda: waiters(server, "k") == 1, 10)
    t2 = threading.Thread(target=take, args=(plain, "theirs"), daemon=True)
    t2.start()
    assert eventually(lambda: waiters(server, "k") == 2, 10)
    wait_out_ttl(1.0)  # several socket timeouts
    first.release()
    t1.join(10)
    t2.join(10)
    assert order[:1] == ["mine"], order


def test_aio_renewals_never_wait_behind_waiting_tasks(server: Server) -> None:
    """100 tasks waiting for a lock took redis-py's whole asyncio pool, and the holder's
    renewals failed (the loss reason blamed a blocked event loop). Must hold: the holder
    keeps its hold."""

    async def main() -> None:
        client = aredis.Redis(port=server.port, max_connections=20)
        locks = relock.aio.Relock(client)
        hold = await locks.acquire("held", ttl=1.5)
        assert hold is not None
        blocker = await locks.acquire("busy", ttl=30)
        assert blocker is not None
        tasks = [asyncio.get_running_loop().create_task(locks.acquire("busy", ttl=5, wait=10)) for _ in range(40)]
        await wait_out_ttl_async(3.5)  # more than twice the holder's ttl
        assert hold.is_valid, hold.reason
        hold.check()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await locks.aclose()

    asyncio.run(main())


# --- steps that change the hold count -------------------------------------------------------


def test_sync_a_reenter_that_timed_out_and_ran_later_is_taken_back(server: Server, proxy: LossProxy) -> None:
    """A LOCK.REENTER whose reply came after the node timeout (a 0.3 s stall) ran on the
    server and was never taken back: count 2 stayed, and the outer release left the lock
    held for its whole ttl by nobody. Must hold: the section is not entered, the count is
    back to 1, and the outer release frees the lock."""
    locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=0.1)
    hold = locks.acquire("k", ttl=20)
    assert hold is not None
    proxy.arm(b"LOCK.REENTER", delay=0.3)
    with pytest.raises(relock.RelockError):
        with hold.reenter():
            pytest.fail("entered a section whose LOCK.REENTER got no reply")
    assert eventually(lambda: (info(server, "k") or {}).get("count") in (1, "1"), 3), info(server, "k")
    hold.release()
    assert eventually(lambda: info(server, "k") is None, 3), "the late re-entry kept the lock"


def test_aio_a_reenter_that_timed_out_and_ran_later_is_taken_back(server: Server, proxy: LossProxy) -> None:
    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=0.1)
        hold = await locks.acquire("k", ttl=20)
        assert hold is not None
        proxy.arm(b"LOCK.REENTER", delay=0.3)
        with pytest.raises(relock.RelockError):
            async with hold.reenter():
                pytest.fail("entered a section whose LOCK.REENTER got no reply")
        assert await until(lambda: (info(server, "k") or {}).get("count") in (1, "1"), 3), info(server, "k")
        await hold.release()
        assert await until(lambda: info(server, "k") is None, 3), "the late re-entry kept the lock"
        await locks.aclose()

    asyncio.run(main())


def test_nested_sections_count_up_and_down_with_from(server: Server) -> None:
    """Every step is sent with the count it expects: nested sections, and a final release."""
    locks = relock.Relock(redis.Redis(port=server.port))
    with locks.lock("k", ttl=10) as hold:
        with hold.reenter() as a:
            with hold.reenter() as b:
                assert (a, b) == (2, 3)
                assert int((info(server, "k") or {})["count"]) == 3
            assert int((info(server, "k") or {})["count"]) == 2
    assert info(server, "k") is None


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_late_exits_repeat_never_takes_the_next_sections_count(server: Server, proxy: LossProxy, flavour: str) -> None:
    """A section's exit whose reply was lost (the connection reset after the server ran it)
    is given back in the background, and sent once more 100 ms after it was answered:
    ``LOCK.RELEASE ... FROM 2``. A section entered at once asked FROM 1 too (count 2 again),
    so that repeat took the new section's count back (2 -> 1) and a section nested in it was
    refused ("hold count is 1, not 2"; found in the Go client by an attack, then here). Must
    hold: the next section keeps its count however long it runs, and nests."""

    def count() -> int:
        return int((info(server, "k") or {}).get("count", -1))

    seen: dict[str, Any] = {}
    if flavour == "sync":
        locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=1.0)
        hold = locks.acquire("k", ttl=20)
        assert hold is not None
        proxy.arm(b"LOCK.RELEASE")
        with hold.reenter():
            pass
        assert proxy.hit.is_set(), "the section's exit went by without losing its reply"
        with hold.reenter() as n:
            seen["entered"], seen["inside"] = n, count()
            # Past the late exit's repeat (100 ms after its answer), had it not been waited for.
            wait_out_ttl(0.3, during=lambda: seen.update(later=min(seen.get("later", 9), count())))
            with hold.reenter() as m:
                seen["nested"] = m
        seen["after"] = count()
        hold.release()
    else:

        async def main() -> None:
            al = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=1.0)
            h = await al.acquire("k", ttl=20)
            assert h is not None
            proxy.arm(b"LOCK.RELEASE")
            async with h.reenter():
                pass
            assert proxy.hit.is_set(), "the section's exit went by without losing its reply"
            async with h.reenter() as n:
                seen["entered"], seen["inside"] = n, count()
                await wait_out_ttl_async(0.3, during=lambda: seen.update(later=min(seen.get("later", 9), count())))
                async with h.reenter() as m:
                    seen["nested"] = m
            seen["after"] = count()
            await h.release()
            await al.aclose()

        asyncio.run(main())
    assert seen == {"entered": 2, "inside": 2, "later": 2, "nested": 3, "after": 1}, seen
    assert eventually(lambda: info(server, "k") is None, 3)


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_redlock_master_that_is_down_does_not_hold_up_each_section(servers3: list[Server], flavour: str) -> None:
    """Redlock over three masters, one of them down (nothing listens on its port): every
    section's exit and entry goes unanswered there and is given back in the background, for
    up to the ttl. An entry that waited for those give-backs to end waited about the ttl each
    time (5.6-6 s with ttl 5 s: found by the attack on the late-step rule, 2026-12-05); one
    master down is what Redlock is for. Must hold: three sections, each with a nested one,
    take far less than one ttl, and the hold's count is right on the two live masters."""
    ports = [servers3[0].port, servers3[1].port, free_port()]
    ttl = 5.0

    def counts() -> list[int]:
        return [int((info(s, "k") or {}).get("count", -1)) for s in servers3[:2]]

    seen: list[tuple[int, int, list[int]]] = []
    started = time.monotonic()
    if flavour == "sync":
        locks = relock.Relock([redis.Redis(port=p) for p in ports], node_timeout=0.1)
        hold = locks.acquire("k", ttl=ttl)
        assert hold is not None
        for _ in range(3):
            with hold.reenter() as n:
                with hold.reenter() as m:
                    seen.append((n, m, counts()))
        took = time.monotonic() - started
        hold.release()
        locks.close()
    else:

        async def main() -> float:
            al = relock.aio.Relock([aredis.Redis(port=p) for p in ports], node_timeout=0.1)
            h = await al.acquire("k", ttl=ttl)
            assert h is not None
            for _ in range(3):
                async with h.reenter() as n:
                    async with h.reenter() as m:
                        seen.append((n, m, counts()))
            took = time.monotonic() - started
            await h.release()
            await al.aclose()
            return took

        took = asyncio.run(main())
    assert seen == [(2, 3, [3, 3])] * 3, seen
    assert took < ttl, f"three sections took {took:.2f} s with one master down (ttl {ttl} s)"
    assert all(info(s, "k") is None for s in servers3[:2])


def test_noperm_ends_at_once_sync_and_aio(server: Server) -> None:
    """A user whose ACL does not cover the key: NOPERM is permanent, never retried."""
    direct(server).execute_command("ACL", "SETUSER", "narrow", "on", ">pw", "~mine:*", "+@all")
    locks = relock.Relock(redis.Redis(port=server.port, username="narrow", password="pw"))
    start = time.monotonic()
    with pytest.raises(relock.ServerError) as got:
        locks.acquire("theirs:k", wait=None)
    assert not got.value.retryable and "NOPERM" in str(got.value)
    assert time.monotonic() - start < 2

    async def main() -> None:
        al = relock.aio.Relock(aredis.Redis(port=server.port, username="narrow", password="pw"))
        with pytest.raises(relock.ServerError) as agot:
            await asyncio.wait_for(al.acquire("theirs:k", wait=None), 5)
        assert not agot.value.retryable

    asyncio.run(main())


def _default_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_sync_ctrl_c_right_after_a_late_grant_gives_it_back(server: Server) -> None:
    """Ctrl-C during the renewal that measures a late grant's validity: the grant was kept
    by nobody until its ttl."""
    import signal
    import subprocess
    import sys

    other = relock.Relock(redis.Redis(port=server.port))
    first = other.acquire("k", ttl=30)
    assert first is not None
    proxy = LossProxy(server.port)
    try:
        code = (
            "import redis, relock\n"
            f"locks = relock.Relock(redis.Redis(port={proxy.port}), node_timeout=5)\n"
            "print('waiting', flush=True)\n"
            "try:\n"
            "    locks.acquire('k', ttl=6)\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted', flush=True)\n"
            "import time; time.sleep(3)\n"
        )
        # SIGINT back to its default and unblocked in the child: a disposition of SIG_IGN and a
        # blocked mask both pass to a child (Python then installs no KeyboardInterrupt), and
        # under pytest-xdist the child ended as if the SIGINT never came (6 runs of 6).
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_default_sigint,
        )
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "waiting"
            assert eventually(lambda: waiters(server, "k") == 1, 10)
            wait_out_ttl(3.0)  # long enough for the grant to be late (under 2/3 of the ttl left)
            # The renewal's reply is held 4 s (under the child's 5 s node timeout): the SIGINT
            # must land while it is awaited. With 2 s the test failed once in a fresh-clone run
            # with three client suites at once (the child ended without printing; not
            # reproduced in 9 loaded runs): most likely the reply got through first, acquire
            # returned and the SIGINT hit the sleep after it. The child's stderr is now shown.
            proxy.arm(b"LOCK.RENEW", delay=4.0)
            first.release()
            assert proxy.hit.wait(10), ("no renewal after the late grant", info(server, "k"), proxy.seen[-6:])
            child.send_signal(signal.SIGINT)
            line = child.stdout.readline().strip()
            if line != "interrupted":
                child.kill()
                raise AssertionError(("the child said", line, child.stderr.read() if child.stderr else "", proxy.seen[-8:]))
            assert eventually(lambda: info(server, "k") is None, 1.5), "the late grant was kept by nobody"
        finally:
            child.kill()
            child.wait(10)
    finally:
        proxy.close()


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_reenter_whose_reply_was_lost_is_taken_back(server: Server, proxy: LossProxy, flavour: str) -> None:
    """The connection reset between LOCK.REENTER and its reply: the step ran (count 2), the
    section is not entered, and the count must come back to 1 (else the outer release leaves
    the lock held for its ttl)."""
    if flavour == "sync":
        locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=1.0)
        hold = locks.acquire("k", ttl=20)
        assert hold is not None
        proxy.arm(b"LOCK.REENTER")
        with pytest.raises(relock.RelockError):
            with hold.reenter():
                pytest.fail("entered a section whose LOCK.REENTER got no reply")
        assert eventually(lambda: (info(server, "k") or {}).get("count") in (1, "1"), 3), info(server, "k")
        hold.release()
    else:

        async def main() -> None:
            al = relock.aio.Relock(aredis.Redis(port=proxy.port), node_timeout=1.0)
            h = await al.acquire("k", ttl=20)
            assert h is not None
            proxy.arm(b"LOCK.REENTER")
            with pytest.raises(relock.RelockError):
                async with h.reenter():
                    pytest.fail("entered a section whose LOCK.REENTER got no reply")
            assert await until(lambda: (info(server, "k") or {}).get("count") in (1, "1"), 3), info(server, "k")
            await h.release()
            await al.aclose()

        asyncio.run(main())
    assert eventually(lambda: info(server, "k") is None, 3)


def test_aio_a_loss_after_failed_renewals_does_not_blame_the_event_loop(server: Server) -> None:
    """Renewals that failed (a server gone) ended the hold with "the event loop did not
    run the renewal in time" (seen with 100 waiting tasks, see below) or without what
    failed. Must hold: the reason names the failed renewals and why they failed."""

    async def main() -> None:
        locks = relock.aio.Relock(aredis.Redis(port=server.port))
        hold = await locks.acquire("k", ttl=1.0)
        assert hold is not None
        server.kill()  # every renewal fails at once (connection refused)
        await asyncio.wait_for(hold.lost.wait(), 5)
        with pytest.raises(relock.LockLost):
            hold.check()
        assert hold.reason is not None
        assert "event loop" not in hold.reason and "renewals failed" in hold.reason, hold.reason
        await locks.aclose()

    asyncio.run(main())
