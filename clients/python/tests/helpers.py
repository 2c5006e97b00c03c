"""Helpers shared by the test files (each defined here once): clients for a test server,
reads of a server's state, bounded waits for a condition (``eventually`` in servers.py for
threads, ``until`` for the event loop), and ``wait_out_ttl``, the one place a test lets a
fixed time pass."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import inspect
import subprocess
import sys
import threading
import time
from typing import Any, Callable, TypeVar

import pytest
import redis
import redis.asyncio as aredis

from servers import Server, eventually

__all__ = [
    "aconnect",
    "connect",
    "direct",
    "eventually",
    "holding",
    "info",
    "info_field",
    "kill_relock_connections",
    "run_python",
    "until",
    "wait_out_ttl",
    "wait_out_ttl_async",
    "waiters",
    "within",
    "yield_to_loop",
]

T = TypeVar("T")


def connect(server: Server, protocol: str = "3", **kw: Any) -> redis.Redis:
    return redis.Redis.from_url(f"{server.url}?protocol={protocol}", decode_responses=True, **kw)


def aconnect(server: Server, protocol: str = "3") -> aredis.Redis:
    return aredis.Redis.from_url(f"{server.url}?protocol={protocol}", decode_responses=True)


def direct(server: Server) -> redis.Redis:
    """A plain client of ``server`` (no relock): to look at or break its state."""
    return redis.Redis(port=server.port, decode_responses=True)


def info(server: Server, key: str) -> dict[str, Any] | None:
    """LOCK.INFO of ``key`` on ``server`` as a dict (RESP2 or RESP3), or None."""
    reply = direct(server).execute_command("LOCK.INFO", key)
    if reply is None:
        return None
    if isinstance(reply, dict):
        return {str(k): v for k, v in reply.items()}
    return dict(zip(reply[0::2], reply[1::2]))


def waiters(server: Server, key: str) -> int:
    got = info(server, key)
    return 0 if got is None else int(got["waiters"])


def holding(servers: list[Server], key: str) -> list[bool]:
    """Per server, whether it has a hold of ``key`` (LOCK.INFO)."""
    return [connect(s).execute_command("LOCK.INFO", key) is not None for s in servers]


def info_field(r: redis.Redis, field: str) -> int:
    return int(r.info("relock")["relock_" + field])


def kill_relock_connections(server: Server) -> None:
    """Closes every client connection of ``server`` but the caller's: relock's idle
    connections are gone, the next command needs a new one."""
    direct(server).execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")


def run_python(code: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    """``code`` in a fresh interpreter with the package; None when it is still running after
    ``timeout`` seconds (it is killed then)."""
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


async def until(check: Callable[[], Any], within: float, every: float = 0.005) -> bool:
    """Whether ``check()`` (a coroutine function too) comes true within ``within`` seconds,
    polled from the event loop (``eventually`` for threads; a generous bound, never a fixed
    sleep)."""

    async def ok() -> bool:
        got = check()
        return bool(await got if inspect.isawaitable(got) else got)

    end = time.monotonic() + within
    while not await ok():
        if time.monotonic() >= end:
            return await ok()
        await asyncio.sleep(every)
    return True


def within(seconds: float, fn: Callable[[], T]) -> T:
    """``fn()``, failing the test (instead of hanging it) if it takes longer than ``seconds``:
    it runs on a daemon thread, left behind if it never returns."""
    future: cf.Future[T] = cf.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            future.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    try:
        return future.result(timeout=seconds)
    except cf.TimeoutError:
        pytest.fail(f"still running after {seconds} s")


def wait_out_ttl(seconds: float, during: Callable[[], object] | None = None, every: float = 0.05) -> None:
    """Lets ``seconds`` pass: a ttl (or a timeout, or a stall) that must run its whole length,
    counted by Redis or the client, with no event to wait for instead. ``during()`` is called
    every ``every`` seconds meanwhile (a check that the hold is still valid, a connection
    killed). Called from a coroutine, it blocks the event loop, which is what a test of a
    blocked loop wants; the others use ``wait_out_ttl_async``."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if during is not None:
            during()
            left = min(every, end - time.monotonic())
        time.sleep(max(0.0, left))


async def wait_out_ttl_async(seconds: float, during: Callable[[], object] | None = None, every: float = 0.05) -> None:
    """``wait_out_ttl`` from the event loop, which keeps running (renewal tasks included)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if during is not None:
            during()
            left = min(every, end - time.monotonic())
        await asyncio.sleep(max(0.0, left))


async def yield_to_loop(times: int = 1) -> None:
    """Lets the other ready tasks run ``times`` turns of the event loop (no time passes)."""
    for _ in range(times):
        await asyncio.sleep(0)


class Lateness:
    """How late this machine runs this process's threads, measured while the block runs: a
    thread sleeps 5 ms at a time and keeps the longest it overslept (``most``, seconds). A
    client's loss timer is such a thread, and so is the test's own after an event is set: a
    timing bound allows for what was measured here, not for a guess, so a client that is late
    by itself still fails on an idle machine."""

    def __init__(self) -> None:
        self.most = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(0.005)
            self.most = max(self.most, time.monotonic() - before - 0.005)

    def __enter__(self) -> Lateness:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
