"""Hostile values: a bool or a string where seconds are expected, pauses that would make
every wait fail. Each is refused at once with InvalidArgument, before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import relock
import relock.aio
from servers import Server


@pytest.mark.parametrize("ttl", [True, False, "30", b"30"])
def test_a_ttl_that_is_not_a_number_is_refused(server: Server, ttl: Any) -> None:
    """ttl=True was taken as 1 s (a lock that expired under a body written for 30 s); a
    string raised TypeError from a comparison."""
    locks = relock.Relock(redis.Redis(port=server.port))
    with pytest.raises(relock.InvalidArgument):
        locks.acquire("k", ttl=ttl)
    hold = locks.acquire("k", ttl=5)
    assert hold is not None
    with pytest.raises(relock.InvalidArgument):
        hold.renew(ttl)
    assert hold.release()
    locks.close()


def test_a_wait_that_is_a_bool_is_refused(server: Server) -> None:
    locks = relock.Relock(redis.Redis(port=server.port))
    with pytest.raises(relock.InvalidArgument):
        locks.acquire("k", wait=True)
    locks.close()


@pytest.mark.parametrize("name", ["retry_delay", "max_partial_hold"])
@pytest.mark.parametrize("value", [-0.1, float("nan"), float("inf"), True, "0.2"])
def test_pause_settings_are_checked(server: Server, name: str, value: Any) -> None:
    """retry_delay=-0.1 made every contended wait of the sync client fail in time.sleep."""
    with pytest.raises(relock.InvalidArgument):
        relock.Relock(redis.Redis(port=server.port), **{name: value})
    with pytest.raises(relock.InvalidArgument):
        relock.aio.Relock(aredis.Redis(port=server.port), **{name: value})


def test_a_zero_retry_delay_is_allowed(server: Server) -> None:
    """The check keeps 0 (retry at once)."""
    locks = relock.Relock(redis.Redis(port=server.port), retry_delay=0)
    hold = locks.acquire("k", ttl=5)
    assert hold is not None
    assert locks.acquire("k", ttl=5, wait=0.05) is None
    assert hold.release()
    locks.close()


def test_a_key_or_owner_prefix_that_is_not_utf8_is_refused_at_once(server: Server) -> None:
    """A lone surrogate in a key went to the server's round (a ServerError naming a
    UnicodeEncodeError); in owner_prefix it escaped the constructor as UnicodeEncodeError."""
    locks = relock.Relock(redis.Redis(port=server.port))
    with pytest.raises(relock.InvalidArgument):
        locks.acquire("\udcff", ttl=1, wait=0)
    with pytest.raises(relock.InvalidArgument):
        locks.acquire_all(["a", "\udcff"], ttl=1, wait=0)
    with pytest.raises(relock.InvalidArgument):
        relock.Relock(redis.Redis(port=server.port), owner_prefix="\udcff")
    with pytest.raises(relock.InvalidArgument):
        relock.aio.Relock(aredis.Redis(port=server.port), owner_prefix="\udcff")
    locks.close()
