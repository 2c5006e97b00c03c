"""The client cases every relock client runs (spec/client-cases/, see its README.md): the
round's verdicts, the validity arithmetic, the classification of failures and the decoding of
the read commands' replies under RESP2 and RESP3, run against this package's rules
(``relock._core``). relock-client and the Node package run the same files, and the reply
samples are checked against the real module by the repository's tests/client_cases.rs.

A case whose ``diverges`` names ``python`` is one this package is known to get wrong: it must
still fail here (so that fixing it means removing the mark)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import redis.exceptions as rex
from redis._parsers.base import BaseParser

from relock import _core as core
from relock._core import Failure, Round
from relock.errors import OtherLimit, OtherMode, OtherPermits, RelockError

CASES = Path(__file__).resolve().parents[3] / "spec" / "client-cases"


def load(name: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((CASES / name).read_text(encoding="utf-8"))["cases"]
    assert cases, f"{name}: no cases"
    return cases


def params(name: str) -> list[Any]:
    return [pytest.param(c, id=c["name"]) for c in load(name)]


def run_case(case: dict[str, Any], check: Callable[[dict[str, Any]], None]) -> None:
    """Runs ``check``: it must pass, unless the case diverges for Python, then it must fail."""
    why = case.get("diverges", {}).get("python")
    if why is None:
        check(case)
        return
    try:
        check(case)
    except AssertionError:
        return
    pytest.fail(f"{case['name']}: passes now; remove its diverges.python mark ({why})")


# --- failures ----------------------------------------------------------------------------------


def exception(reply: str) -> Exception:
    """A failure as redis-py raises it: ``-TEXT`` an error reply off the wire, ``timeout``,
    ``down``."""
    if reply == "timeout":
        return rex.TimeoutError("Timeout reading from 127.0.0.1:6379")
    if reply == "down":
        return rex.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    assert reply.startswith("-"), reply
    error: Exception = BaseParser.parse_error(reply[1:])  # type: ignore[no-untyped-call]
    return error


def failure(reply: str) -> Failure:
    return core.classify(exception(reply))


def classified(f: Failure) -> dict[str, Any]:
    kind = (
        "other_limit" if f.other_limit is not None
        else "other_mode" if f.other_mode
        else "other_permits" if f.other_permits
        else "grace" if f.grace
        else "bad_ttl" if f.bad_ttl
        else None
    )
    out: dict[str, Any] = {"class": "permanent" if f.permanent else "transient", "kind": kind}
    if f.other_limit is not None:
        out["limit"] = f.other_limit
    return out


@pytest.mark.parametrize("case", params("errors.json"))
def test_error_case(case: dict[str, Any]) -> None:
    def check(c: dict[str, Any]) -> None:
        assert classified(failure(c["reply"])) == c["expect"]

    run_case(case, check)


# --- validity ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", params("validity.json"))
def test_validity_case(case: dict[str, Any]) -> None:
    def check(c: dict[str, Any]) -> None:
        ttl = c["ttl_ms"] / 1000
        assert round(core.drift(ttl) * 1_000_000) == c["drift_us"]
        v = core.validity(ttl, c["elapsed_us"] / 1_000_000)
        assert (None if v is None else round(v * 1_000_000)) == c["validity_us"]

    run_case(case, check)


# --- the round ---------------------------------------------------------------------------------


def round_of(c: dict[str, Any]) -> tuple[Round[int], list[str]]:
    """The case's round, started at 0, fed its replies, finished ``elapsed_ms`` later; with the
    progress after each reply."""
    rnd: Round[int] = Round([f"m{i}" for i in range(c["masters"])], 0.0, until_all=c["until"] == "all")
    progress = []
    for i, r in c["replies"]:
        if r == "nil":
            progress.append(rnd.on_reply(i, None))
        elif r.startswith("grant "):
            progress.append(rnd.on_reply(i, int(r[len("grant ") :])))
        else:
            progress.append(rnd.on_reply(i, None, failure(r)))
    return rnd.finish(c.get("elapsed_ms", 5) / 1000), progress


def verdict(e: RelockError) -> str:
    if isinstance(e, OtherLimit):
        return "other_limit"
    if isinstance(e, OtherMode):
        return "other_mode"
    if isinstance(e, OtherPermits):
        return "other_permits"
    return "not_acquired" if e.retryable else "permanent"


def check_round(c: dict[str, Any]) -> None:
    want = c["expect"]
    ttl = c.get("ttl_ms", 10_000) / 1000
    rnd, progress = round_of(c)
    if "progress" in want:
        assert progress == want["progress"], "progress"
    if "tokens" in want:
        assert [rnd.agreed.get(i) for i in range(rnd.n)] == want["tokens"], "tokens"
    if "may_hold" in want:
        assert rnd.may_hold() == want["may_hold"], "may_hold"
    if "give_back_later" in want:
        now, later = rnd.give_back()
        assert now == [t is not None for t in want.get("tokens", now)], "give_back now"
        assert later == want["give_back_later"], "give_back_later"
    if "validity_ms" in want:
        until = rnd.valid_until(ttl)
        left = None if until is None else (until - rnd.started) * 1000
        if want["validity_ms"] is None or left is None:
            assert left == want["validity_ms"], f"validity_ms {left}"
        else:
            assert abs(left - want["validity_ms"]) < 1e-6, f"validity_ms {left}"
    if "acquire" in want:
        got = "acquired" if rnd.valid_until(ttl) is not None else verdict(rnd.acquire_error("k", ttl))
        assert got == want["acquire"], f"acquire {got}"
    if "renew" in want:
        if rnd.valid_until(ttl) is not None:
            got = "renewed"
        elif rnd.bad_ttl():
            got = "kept"
        else:
            got = rnd.renew_verdict()
        assert got == want["renew"], f"renew {got}"
    if "release" in want:
        # release() answers True, raises ServerError (permanent), or answers False, which
        # does not tell a lost lock from a release without a quorum.
        if rnd.won():
            got = "released"
        elif rnd.release_error("k") is not None:
            got = "permanent"
        else:
            got = "lost or no_quorum"
        expected = want["release"]
        assert got == expected or (got == "lost or no_quorum" and expected in ("lost", "no_quorum")), f"release {got}"
    for field, passed in (("wait", False), ("wait_at_deadline", True)):
        if field in want:
            error = rnd.after_failed("k", ttl, None, passed, bounded=False)
            got = "again" if error is None else verdict(error)
            got = "stop" if got == "not_acquired" else got
            assert got == want[field], f"{field} {got}"


@pytest.mark.parametrize("case", params("round.json"))
def test_round_case(case: dict[str, Any]) -> None:
    run_case(case, check_round)


# --- replies -----------------------------------------------------------------------------------


def value(t: Any, resp3: bool) -> Any:
    """A reply as the case files write it, as redis-py gives it (bytes for bulk strings, a
    dict for a RESP3 map)."""
    if t is None:
        return None
    ((tag, v),) = t.items()
    if tag == "int":
        return v
    if tag == "bulk":
        return v.encode("utf-8")
    if tag == "simple":
        return v
    if tag == "double":
        return float(v)
    if tag == "bool":
        return bool(v)
    if tag in ("array", "set"):
        return [value(x, resp3) for x in v]
    if tag == "map":
        return {value(k, resp3): value(x, resp3) for k, x in v}
    raise ValueError(f"unknown reply tag {tag}")


def ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def decode(command: str, reply: Any) -> Any:
    """This package's decoding of a sample, in the case files' shape."""
    if command == "LOCK.INFO":
        i = core.parse_info("s", reply)
        if i is None:
            return None
        return {
            "owner": i.owner, "token": i.token, "count": i.count, "ttl_ms": ms(i.ttl), "waiters": i.waiters,
            "mode": i.mode, "holders": i.holders, "limit": i.limit, "permits_free": i.permits_free,
        }
    if command == "LOCK.HOLDERS":
        return [
            {"owner": h.owner, "token": h.token, "count": h.count, "ttl_ms": ms(h.ttl), "permits": h.permits}
            for h in core.parse_holders("s", reply)
        ]
    if command in ("LOCK.HISTORY", "LOCK.LOG"):
        return [
            {
                "id": e.id, "time_ms": ms(e.time), "db": e.db, "key": e.key, "owner": e.owner, "token": e.token,
                "reason": e.reason, "held_ms": ms(e.held),
                "who": None if e.who is None else {
                    "client": e.who.client, "name": e.who.name, "user": e.who.user, "addr": e.who.addr,
                    "command": e.who.command,
                },
                "waiters": e.waiters,
            }
            for e in core.parse_log("s", reply)
        ]
    if command == "LOCK.STATS":
        return [
            {
                "key": s.key, "waits": s.waits, "granted": s.granted, "timeouts": s.timeouts,
                "contended": s.contended, "wait_ms_total": s.wait_ms_total, "error": s.error,
                "wait_ms_max": s.wait_ms_max,
            }
            for s in core.parse_stats("s", reply)
        ]
    if command == "LOCK.WAITERS":
        return [
            {
                "owner": w.owner, "mode": w.mode, "limit": w.limit, "permits": w.permits, "client": w.client,
                "waited_ms": ms(w.waited), "timeout_ms": ms(w.timeout), "ttl_ms": ms(w.ttl),
            }
            for w in core.parse_waiters("s", reply)
        ]
    raise AssertionError(f"no decoder for {command}")


@pytest.mark.parametrize("case", params("replies.json"))
def test_reply_case(case: dict[str, Any]) -> None:
    def check(c: dict[str, Any]) -> None:
        assert "decoded" in c, "no decoded"
        command = c["command"][0]
        want = c["decoded"]
        if command == "LOCK.HOLDERS" and want is None:
            want = []  # holders() is a list: no lock, no holders
        for resp in ("resp2", "resp3"):
            assert decode(command, value(c[resp], resp == "resp3")) == want, resp

    run_case(case, check)
