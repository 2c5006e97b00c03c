"""The Redlock round as pure logic, with fake masters and no server: which replies decide a
round, what a finished round means for an acquisition, a renewal, a release and a wait, the
validity arithmetic with drift, and where a failed round is given back. The cases follow
relock-client's (client/src/round.rs); where the package decides otherwise, the case says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import pytest
import redis.exceptions as rex
from redis._parsers.base import BaseParser

from relock import _core as core
from relock._core import Failure, Round
from relock.errors import NotAcquired, OtherLimit, OtherMode, RelockError, ServerError

# --- fake masters ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """Granted (renewed, released) with this token (count left, for a release)."""

    token: int


@dataclass(frozen=True)
class Limit:
    """``ERR lock has another limit (n)``: permanent."""

    limit: int


REFUSE = "refuse"  # nil: another owner's, or no longer ours
TIMEOUT = "timeout"  # no answer within the node timeout
DOWN = "down"  # the connection was refused: transient
BUSY = "busy"  # BUSY: transient
WRONGTYPE = "wrongtype"  # permanent
NO_MODULE = "no module"  # the module is not loaded: permanent
OTHER_MODE = "other mode"  # ERR lock is held in another mode: permanent

Fake = Union[Grant, Limit, str]


def off_the_wire(line: str) -> Exception:
    """The exception redis-py raises for an error reply ``-line``."""
    error: Exception = BaseParser.parse_error(line)
    return error


ERRORS: dict[str, Exception] = {
    TIMEOUT: rex.TimeoutError("Timeout reading from 127.0.0.1:6379"),
    DOWN: rex.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    BUSY: off_the_wire("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
    WRONGTYPE: off_the_wire("WRONGTYPE Operation against a key holding the wrong kind of value"),
    NO_MODULE: off_the_wire("ERR unknown command 'LOCK.ACQUIRE', with args beginning with: 'k' "),
    OTHER_MODE: off_the_wire("ERR lock is held in another mode"),
}


def reply(fake: Fake) -> tuple[Any, Failure | None]:
    """What a fake master's answer is to the round: a value, a refusal, or a failure."""
    if isinstance(fake, Grant):
        return fake.token, None
    if isinstance(fake, Limit):
        return None, core.classify(off_the_wire(f"ERR lock has another limit ({fake.limit})"))
    if fake == REFUSE:
        return None, None
    return None, core.classify(ERRORS[fake])


def names(n: int) -> list[str]:
    return [f"m{i}" for i in range(n)]


def run(masters: int, replies: list[tuple[int, Fake]], elapsed_ms: float = 5, until_all: bool = False) -> tuple[Round[Any], list[str]]:
    """A round over ``masters`` fake masters, started at 0 and fed ``replies`` (master,
    answer) in order, finished ``elapsed_ms`` later; returns it and the progress after each
    reply."""
    rnd: Round[Any] = Round(names(masters), 0.0, until_all)
    progress = [rnd.on_reply(i, *reply(fake)) for i, fake in replies]
    return rnd.finish(elapsed_ms / 1000), progress


def indices(servers: list[str]) -> list[int]:
    return [int(s.removeprefix("m")) for s in servers]


def test_the_fakes_fail_the_way_their_names_say() -> None:
    fakes: list[tuple[Fake, bool]] = [
        (TIMEOUT, False),
        (DOWN, False),
        (BUSY, False),
        (WRONGTYPE, True),
        (NO_MODULE, True),
        (Limit(3), True),
        (OTHER_MODE, True),
    ]
    for fake, permanent in fakes:
        value, failure = reply(fake)
        assert value is None and failure is not None, fake
        assert failure.permanent == permanent, (fake, failure)
    assert reply(TIMEOUT)[1] == Failure("no reply in time (Timeout reading from 127.0.0.1:6379)", timeout=True)
    no_module = reply(NO_MODULE)[1]
    assert no_module is not None and "is the relock module loaded on this server?" in no_module.message
    for line in ["LOADING Redis is loading the dataset in memory", "READONLY You can't write against a read only replica.",
                 "TRYAGAIN Multiple keys request during rehashing of slot", "OOM command not allowed",
                 "CLUSTERDOWN The cluster is down", "MASTERDOWN Link with MASTER is down",
                 "NOREPLICAS Not enough good replicas to write.", "ERR max number of clients reached"]:
        assert not core.classify(off_the_wire(line)).permanent, line
    # A redirection is a cluster client's business; a plain client asked a cluster node.
    for line in ["MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381"]:
        assert not core.classify(off_the_wire(line), cluster=True).permanent, line
        failure = core.classify(off_the_wire(line))
        assert failure.permanent and failure.message.startswith(line.split()[0]) and "RedisCluster" in failure.message, line
    for line in ["NOPERM this user has no permissions to run the 'lock.acquire' command",
                 "WRONGPASS invalid username-password pair or user is disabled.", "ERR invalid ttl_ms"]:
        assert core.classify(off_the_wire(line)).permanent, line


# --- replies decide the round ----------------------------------------------------------------

P, W, L = "pending", "won", "lost"

DECIDE = [
    # (what, masters, until all answered, replies, progress after each, tokens kept, failed in order)
    ("one master grants", 1, False, [(0, Grant(7))], [W], [7], []),
    ("one master refuses", 1, False, [(0, REFUSE)], [L], [None], [0]),
    ("one master times out", 1, False, [(0, TIMEOUT)], [L], [None], [0]),
    ("one master fails permanently", 1, False, [(0, NO_MODULE)], [L], [None], [0]),
    ("3: two grants win before the third answers; its late grant is ignored", 3, False,
     [(0, Grant(1)), (1, Grant(2)), (2, Grant(3))], [P, W, W], [1, 2, None], []),
    ("3: grant, refusal, grant", 3, False, [(0, Grant(1)), (1, REFUSE), (2, Grant(3))], [P, P, W], [1, None, 3], [1]),
    ("3: two refusals lose; a late grant is ignored", 3, False,
     [(0, REFUSE), (1, REFUSE), (2, Grant(3))], [P, L, L], [None, None, None], [0, 1]),
    ("3: a timeout and a transient error lose like refusals", 3, False,
     [(2, TIMEOUT), (0, DOWN)], [P, L], [None, None, None], [2, 0]),
    ("3: a grant, a timeout, a refusal", 3, False,
     [(0, Grant(1)), (1, TIMEOUT), (2, REFUSE)], [P, P, L], [1, None, None], [1, 2]),
    ("3: one permanent error leaves a quorum to win", 3, False,
     [(1, WRONGTYPE), (0, Grant(1)), (2, Grant(3))], [P, P, W], [1, None, 3], [1]),
    ("3: replies out of the masters' order", 3, False, [(2, Grant(3)), (0, Grant(1))], [P, W], [1, None, 3], []),
    ("3: a master answering twice counts once", 3, False,
     [(0, Grant(1)), (0, Grant(9)), (0, REFUSE), (1, BUSY), (2, Grant(3))], [P, P, P, P, W], [1, None, 3], [1]),
    ("3: a master the round does not know is ignored", 3, False,
     [(7, Grant(7)), (3, REFUSE), (-1, REFUSE), (0, Grant(1)), (1, Grant(2))], [P, P, P, P, W], [1, 2, None], []),
    ("5: three grants win; late refusals are ignored", 5, False,
     [(0, Grant(1)), (3, Grant(4)), (4, Grant(5)), (1, REFUSE), (2, REFUSE)], [P, P, W, W, W], [1, None, None, 4, 5], []),
    ("5: three refusals lose", 5, False,
     [(0, REFUSE), (1, REFUSE), (2, REFUSE), (3, Grant(4))], [P, P, L, L], [None] * 5, [0, 1, 2]),
    ("5: decided by the last reply, won", 5, False,
     [(0, Grant(1)), (1, TIMEOUT), (2, REFUSE), (3, Grant(4)), (4, Grant(5))], [P, P, P, P, W], [1, None, None, 4, 5], [1, 2]),
    ("5: decided by the last reply, lost to a mix of failures", 5, False,
     [(0, Grant(1)), (1, Grant(2)), (2, REFUSE), (3, TIMEOUT), (4, BUSY)], [P, P, P, P, L], [1, 2, None, None, None], [2, 3, 4]),
    ("5: two permanent errors still leave a quorum", 5, False,
     [(0, NO_MODULE), (1, WRONGTYPE), (2, Grant(3)), (3, Grant(4)), (4, Grant(5))], [P, P, P, P, W], [None, None, 3, 4, 5], [0, 1]),
    ("all answered, 3: a quorum is not enough while one is to answer", 3, True,
     [(0, Grant(1)), (1, Grant(2)), (2, REFUSE)], [P, P, W], [1, 2, None], [2]),
    ("all answered, 3: a grant after two refusals is kept (to be undone)", 3, True,
     [(0, REFUSE), (1, REFUSE), (2, Grant(3))], [P, P, L], [None, None, 3], [0, 1]),
    ("all answered, 1: a refusal", 1, True, [(0, REFUSE), (0, Grant(1))], [L, L], [None], [0]),
]


@pytest.mark.parametrize("what, masters, until_all, replies, progress, tokens, failed", DECIDE, ids=[c[0] for c in DECIDE])
def test_replies_decide_the_round(
    what: str, masters: int, until_all: bool, replies: list[tuple[int, Fake]], progress: list[str],
    tokens: list[int | None], failed: list[int],
) -> None:
    rnd, seen = run(masters, replies, until_all=until_all)
    assert seen == progress
    assert [rnd.agreed.get(i) for i in range(masters)] == tokens
    assert [i for i, _ in rnd.failures] == failed
    assert rnd.agreed_by() == [t is not None for t in tokens]


# --- acquisitions and renewals ---------------------------------------------------------------

TTL = 10.0  # s; drift 102 ms


def left(elapsed_ms: float) -> tuple[str, float]:
    return ("valid", 10_000 - elapsed_ms - 102)


def busy(*blamed: int) -> tuple[str, list[int]]:
    """NotAcquired, retryable, naming the masters that failed (refusals are nobody's fault)."""
    return ("not acquired", list(blamed))


def permanent(*blamed: int) -> tuple[str, list[int]]:
    """An error retrying cannot help, naming the masters that failed permanently."""
    return ("permanent", list(blamed))


EXHAUSTED = ("exhausted",)
LOST = ("lost",)  # a renewal: the hold is gone
RETRY = ("retry",)  # a renewal: only unanswered, try again while validity is left


def acquired(rnd: Round[Any]) -> tuple[Any, ...]:
    until = rnd.valid_until(TTL)
    if until is not None:
        return ("valid", round((until - rnd.started) * 1000, 6))
    e = rnd.acquire_error("k", TTL)
    assert e.key == "k"
    if rnd.won():
        assert isinstance(e, NotAcquired) and "leaving no validity" in str(e)
        return EXHAUSTED
    if isinstance(e, NotAcquired):
        assert e.retryable
        return ("not acquired", indices(e.servers))
    assert isinstance(e, ServerError) and not e.retryable, e
    return ("permanent", indices(e.servers))


def renewed(rnd: Round[Any]) -> tuple[Any, ...]:
    until = rnd.valid_until(TTL)
    if until is not None:
        return ("valid", round((until - rnd.started) * 1000, 6))
    return LOST if rnd.renew_verdict() == "lost" else RETRY


JUDGED = [
    # (what, masters, replies, elapsed ms, acquisition, renewal)
    ("1: granted", 1, [(0, Grant(1))], 3, left(3), left(3)),
    ("1: refused", 1, [(0, REFUSE)], 3, busy(), LOST),
    ("1: timeout", 1, [(0, TIMEOUT)], 100, busy(0), RETRY),
    ("1: transient error", 1, [(0, BUSY)], 3, busy(0), RETRY),
    # relock-client reports a permanent error for the renewal; the package ends the hold, which
    # no renewal can keep any more, and says why in the loss reason.
    ("1: permanent error", 1, [(0, WRONGTYPE)], 3, permanent(0), LOST),
    ("3: all granted", 3, [(0, Grant(1)), (1, Grant(2))], 100, left(100), left(100)),
    ("3: quorum despite a refusal", 3, [(0, REFUSE), (1, Grant(2)), (2, Grant(3))], 40, left(40), left(40)),
    ("3: one grant, two refusals", 3, [(0, Grant(1)), (1, REFUSE), (2, REFUSE)], 3, busy(), LOST),
    ("3: one grant, a refusal, a timeout", 3, [(0, Grant(1)), (1, REFUSE), (2, TIMEOUT)], 100, busy(2), RETRY),
    ("3: a refusal and a permanent error: lost for a renewal", 3, [(0, Grant(1)), (1, REFUSE), (2, WRONGTYPE)], 3, busy(2), LOST),
    ("3: two permanent errors", 3, [(0, Grant(1)), (1, NO_MODULE), (2, WRONGTYPE)], 3, permanent(1, 2), LOST),
    ("3: one permanent error and a timeout", 3, [(0, NO_MODULE), (1, TIMEOUT)], 100, busy(0, 1), RETRY),
    ("3: transient errors only", 3, [(0, DOWN), (1, BUSY)], 3, busy(0, 1), RETRY),
    ("5: three grants", 5, [(4, Grant(5)), (2, Grant(3)), (0, Grant(1))], 250, left(250), left(250)),
    ("5: two permanent, one timeout", 5, [(0, Grant(1)), (1, Grant(2)), (2, NO_MODULE), (3, WRONGTYPE), (4, TIMEOUT)], 100,
     busy(2, 3, 4), RETRY),
    ("5: three permanent", 5, [(0, Grant(1)), (2, NO_MODULE), (3, WRONGTYPE), (4, NO_MODULE)], 3, permanent(2, 3, 4), LOST),
    ("5: two refusals and a permanent error: lost for a renewal", 5, [(0, REFUSE), (1, Grant(2)), (2, WRONGTYPE), (3, REFUSE)], 3,
     busy(2), LOST),
    ("5: one refusal, two timeouts", 5, [(0, REFUSE), (1, Grant(2)), (2, TIMEOUT), (3, TIMEOUT)], 100, busy(2, 3), RETRY),
    # A renewal that took the whole ttl renews nothing the holder can count on; the hold's own
    # validity (which it keeps from its last good round) decides when it is lost.
    ("3: won, but after the whole ttl", 3, [(0, Grant(1)), (1, Grant(2))], 10_000, EXHAUSTED, RETRY),
    ("3: won, but far past the ttl", 3, [(0, Grant(1)), (1, Grant(2))], 1e15, EXHAUSTED, RETRY),
    ("3: won with exactly the drift left: none", 3, [(0, Grant(1)), (1, Grant(2))], 10_000 - 102, EXHAUSTED, RETRY),
    ("3: won with 1 ms more than the drift left", 3, [(0, Grant(1)), (1, Grant(2))], 10_000 - 103, ("valid", 1.0), ("valid", 1.0)),
]


@pytest.mark.parametrize("what, masters, replies, elapsed, acquire, renew", JUDGED, ids=[c[0] for c in JUDGED])
def test_acquisitions_and_renewals_are_judged(
    what: str, masters: int, replies: list[tuple[int, Fake]], elapsed: float, acquire: tuple[Any, ...], renew: tuple[Any, ...],
) -> None:
    rnd, _ = run(masters, replies, elapsed)
    assert acquired(rnd) == acquire
    assert renewed(rnd) == renew


def test_a_no_quorum_error_says_how_many_granted_and_names_every_failure() -> None:
    rnd, _ = run(3, [(0, Grant(1)), (1, REFUSE), (2, TIMEOUT)])
    e = rnd.acquire_error("k", TTL)
    assert isinstance(e, NotAcquired) and e.retryable and e.servers == ["m2"]
    assert "1 of 3 servers granted, 2 needed" in str(e)
    assert "m1: not granted" in str(e) and "m2: no reply in time" in str(e)
    one, _ = run(1, [(0, REFUSE)])
    assert str(one.acquire_error("k", TTL, 0.3)) == "lock 'k' is held by another owner within 0.3 s"


# --- validity --------------------------------------------------------------------------------

VALIDITY = [
    # (ttl ms, elapsed ms, validity µs): ttl - elapsed - (ttl/100 + 2 ms); none at or below 0
    (1, 0, None),
    (2, 0, None),
    (3, 0, 970),
    (100, 0, 97_000),
    (100, 97, None),
    (100, 96, 1_000),
    (1_000, 500, 488_000),
    (1_000_000_000_000, 0, 989_999_999_998_000),
    (1_000_000_000_000, 2**63, None),
]


@pytest.mark.parametrize("ttl, elapsed, want", VALIDITY)
def test_validity_is_ttl_minus_elapsed_minus_drift(ttl: int, elapsed: int, want: int | None) -> None:
    got = core.validity(ttl / 1000, elapsed / 1000)
    assert (None if got is None else round(got * 1_000_000, 3)) == want
    rnd, _ = run(1, [(0, Grant(1))], elapsed)
    until = rnd.valid_until(ttl / 1000)
    assert (None if until is None else round((until - rnd.started) * 1_000_000, 3)) == want


def test_no_quorum_no_validity_however_fast() -> None:
    rnd, _ = run(3, [(0, Grant(1))], 0)
    assert rnd.valid_until(TTL) is None
    assert core.validity(TTL, -5.0) == pytest.approx(TTL - 0.102), "a clock that went back counts as no time"


@pytest.mark.parametrize(
    "replies, elapsed, late",
    [
        ([(0, Grant(1))], 3, False),
        ([(0, Grant(1))], 3_000, False),  # 6898 ms left of 10 s: enough
        ([(0, Grant(1))], 3_400, True),  # 6498 ms left: under two thirds, measure with a renewal
        ([(0, Grant(1))], 20_000, True),  # nothing left
        ([(0, REFUSE)], 3_400, False),  # nothing granted, nothing to measure
    ],
)
def test_a_grant_after_a_long_wait_is_measured_again(replies: list[tuple[int, Fake]], elapsed: float, late: bool) -> None:
    rnd, _ = run(1, replies, elapsed)
    assert rnd.granted_late(TTL) == late


# --- releases --------------------------------------------------------------------------------

RELEASES = [
    # (what, masters, replies: Grant(n) = released with n holds left, released)
    ("1: released", 1, [(0, Grant(0))], True),
    ("1: one hold of two released", 1, [(0, Grant(1))], True),
    ("1: not ours", 1, [(0, REFUSE)], False),
    ("1: timeout", 1, [(0, TIMEOUT)], False),
    ("1: permanent error", 1, [(0, WRONGTYPE)], False),
    ("3: all released", 3, [(0, Grant(0)), (1, Grant(0)), (2, Grant(0))], True),
    ("3: quorum released, one not ours", 3, [(0, Grant(0)), (1, REFUSE), (2, Grant(0))], True),
    ("3: quorum released, one down", 3, [(0, DOWN), (1, Grant(0)), (2, Grant(0))], True),
    ("3: one released, two not ours", 3, [(0, Grant(0)), (1, REFUSE), (2, REFUSE)], False),
    ("3: none ours", 3, [(0, REFUSE), (1, REFUSE), (2, REFUSE)], False),
    ("3: one released, one not ours, one timeout", 3, [(0, Grant(0)), (1, REFUSE), (2, TIMEOUT)], False),
    ("3: all timed out", 3, [(2, TIMEOUT), (0, TIMEOUT), (1, TIMEOUT)], False),
    ("5: two released, three not ours", 5, [(0, Grant(0)), (1, Grant(0)), (2, REFUSE), (3, REFUSE), (4, REFUSE)], False),
    ("5: three released, two busy", 5, [(0, Grant(0)), (1, BUSY), (2, Grant(0)), (3, BUSY), (4, Grant(0))], True),
]


@pytest.mark.parametrize("what, masters, replies, released", RELEASES, ids=[c[0] for c in RELEASES])
def test_releases_are_judged(what: str, masters: int, replies: list[tuple[int, Fake]], released: bool) -> None:
    """A release asks every master and waits for every answer (a master that still holds it
    would keep it until its ttl); it counts as done with a quorum."""
    rnd, progress = run(masters, replies, until_all=True)
    assert all(p == P for p in progress[:-1]), "a release waits for every master"
    assert progress[-1] != P
    assert rnd.won() == released


# --- failed acquisitions: given back, and what next ------------------------------------------

GIVE_BACK = [
    # (masters, replies, released now, released later)
    (1, [(0, REFUSE)], [False], [False]),  # refused: nothing landed
    (1, [(0, NO_MODULE)], [False], [False]),
    (1, [(0, TIMEOUT)], [False], [True]),  # the request may still be granted
    (3, [(0, Grant(1)), (1, WRONGTYPE), (2, REFUSE)], [True, False, False], [False, False, False]),
    (3, [(0, TIMEOUT), (2, DOWN)], [False, False, False], [True, True, True]),  # m1 still to answer
    (5, [(1, Grant(2)), (0, NO_MODULE), (3, WRONGTYPE), (4, REFUSE)], [False, True, False, False, False],
     [False, False, True, False, False]),
]


@pytest.mark.parametrize("masters, replies, now, later", GIVE_BACK)
def test_a_failed_round_says_where_to_give_back(masters: int, replies: list[tuple[int, Fake]], now: list[bool], later: list[bool]) -> None:
    rnd, _ = run(masters, replies)
    assert rnd.give_back() == (now, later)


STOP = "stop"
AGAIN = "again"

AFTER_FAILED = [
    # (what, masters, replies, deadline passed, bounded, what next, masters named)
    ("1: refused a bounded wait: the server's own timeout ran out", 1, [(0, REFUSE)], False, True, STOP, []),
    ("1: refused a wait without limit: wait again", 1, [(0, REFUSE)], False, False, AGAIN, []),
    ("1: refused at the deadline", 1, [(0, REFUSE)], True, True, STOP, []),
    ("1: timeout", 1, [(0, TIMEOUT)], False, True, AGAIN, []),
    ("1: timeout at the deadline", 1, [(0, TIMEOUT)], True, True, STOP, [0]),
    ("1: down", 1, [(0, DOWN)], False, True, AGAIN, []),
    ("1: permanent", 1, [(0, NO_MODULE)], False, False, "permanent", [0]),
    ("3: two permanent, before the deadline", 3, [(0, NO_MODULE), (1, WRONGTYPE)], False, False, "permanent", [0, 1]),
    ("3: a refusal and an error", 3, [(0, Grant(1)), (1, REFUSE), (2, BUSY)], False, True, AGAIN, []),
    ("3: a refusal and an error at the deadline", 3, [(0, Grant(1)), (1, REFUSE), (2, BUSY)], True, True, STOP, [2]),
    ("3: only refusals, bounded: several masters wait again", 3, [(0, REFUSE), (1, REFUSE)], False, True, AGAIN, []),
    ("3: a minority cut off by the partial-hold limit", 3, [(0, Grant(1))], False, True, AGAIN, []),
    ("3: a minority cut off at the deadline", 3, [(0, Grant(1))], True, True, STOP, []),
]


@pytest.mark.parametrize("what, masters, replies, passed, bounded, want, named", AFTER_FAILED, ids=[c[0] for c in AFTER_FAILED])
def test_failed_acquisitions_are_judged(
    what: str, masters: int, replies: list[tuple[int, Fake]], passed: bool, bounded: bool, want: str, named: list[int],
) -> None:
    rnd, _ = run(masters, replies)
    e: RelockError | None = rnd.after_failed("k", TTL, 1.0, passed, bounded)
    if want == AGAIN:
        assert e is None
        return
    assert e is not None
    if want == "permanent":
        assert isinstance(e, ServerError) and not e.retryable
    else:
        assert isinstance(e, NotAcquired) and e.retryable
    assert indices(e.servers) == named


def test_mode_and_limit_refusals_name_the_master() -> None:
    rnd, _ = run(1, [(0, Limit(3))])
    e = rnd.acquire_error("k", TTL)
    assert isinstance(e, OtherLimit) and (e.key, e.servers, e.limit, e.retryable) == ("k", ["m0"], 3, False)
    rnd, _ = run(3, [(1, OTHER_MODE), (0, WRONGTYPE), (2, OTHER_MODE)])
    e = rnd.acquire_error("k", TTL)
    assert isinstance(e, OtherMode) and e.servers == ["m1"] and not e.retryable
    # A minority of them is only a minority.
    rnd, _ = run(3, [(0, Limit(0)), (1, Grant(1)), (2, Grant(2))])
    assert acquired(rnd) == left(5)
    # Other error replies stay what they were.
    rnd, _ = run(1, [(0, NO_MODULE)])
    assert acquired(rnd) == permanent(0)


def test_a_round_without_masters_is_lost_not_an_exception() -> None:
    rnd: Round[Any] = Round([], 0.0)
    assert rnd.progress() == L
    assert rnd.on_reply(0, 1) == L
    rnd.finish(1.0)
    assert not rnd.won() and rnd.valid_until(1.0) is None
    assert isinstance(rnd.acquire_error("k", 1.0), RelockError)


def test_elapsed_is_measured_from_the_start_and_never_negative() -> None:
    assert Round(names(1), 10.0).finish(10.042).elapsed == pytest.approx(0.042)
    assert Round(names(1), 10.0).finish(9.0).elapsed == 0.0
