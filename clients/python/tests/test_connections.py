"""Connections to one server: a stopped server, one slow to connect to, one stopped before the
first call; each call bounded by its deadline."""

from __future__ import annotations

import time

import pytest
import redis

import relock
from helpers import connect, within
from servers import Server, SlowProxy


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_a_paused_server_costs_a_call_its_deadline(server: Server) -> None:
    locks = relock.Relock(connect(server))  # no socket_timeout
    assert locks.info("k") is None  # a connection is open
    server.pause()
    try:
        for _ in range(3):  # the first on the open connection, the others on new ones
            started = time.monotonic()
            assert within(10, lambda: locks.acquire("k", wait=0)) is None
            assert time.monotonic() - started < 1.0
        started = time.monotonic()
        with pytest.raises(relock.ServerError) as e:
            within(10, lambda: locks.info("k"))
        assert e.value.retryable and e.value.servers == locks.servers
        assert time.monotonic() - started < 2.5  # info() allows a server 1 s
    finally:
        server.resume()
    # It serves again once the server is back. (Not "k" yet: the server still executes the
    # requests that reached it while it was stopped, and those late grants last their ttl.)
    with locks.lock("k2", wait=0) as h:
        assert h.token > 0


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_a_server_slow_to_connect_to_serves_the_next_calls(server: Server) -> None:
    """Connecting takes 0.3 s (each new connection), a command 0.1 ms, the node timeout is
    0.1 s. The first connection of a one-server client may take up to 2 s (a process starting
    up does not know yet how far its server is). Later ones count against each call's
    deadline: a call gives up while a connection opens in the background, and the next calls
    use it. (Opening a connection within each call's deadline would never succeed.)"""
    proxy = SlowProxy(server.port, 0.3)
    try:
        locks = relock.Relock(redis.Redis(port=proxy.port), node_timeout=0.1)
        started = time.monotonic()
        with locks.lock("k", ttl=5, wait=0) as h:
            assert h.token > 0 and time.monotonic() - started < 2.0
        connect(server).execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        started = time.monotonic()
        assert locks.acquire("k", wait=0) is None  # gave up while connecting
        assert time.monotonic() - started < 1.0
        with locks.lock("k", ttl=5, wait=5) as h:  # tries again; a connection is open by then
            assert time.monotonic() - started < 5
        started = time.monotonic()
        with locks.lock("k", wait=0):  # on the open connection: quick
            assert time.monotonic() - started < 0.5
    finally:
        proxy.close()


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_a_server_stopped_before_the_first_call(server: Server) -> None:
    """No connection was ever opened: a one-server client waits 2 s for one, not forever."""
    locks = relock.Relock(connect(server))
    server.pause()
    try:
        for _ in range(2):
            started = time.monotonic()
            assert within(10, lambda: locks.acquire("k", wait=0)) is None
            assert time.monotonic() - started < 4.0
    finally:
        server.resume()

