"""What the sync and asyncio clients share, with no I/O: defaults and limits, owners, the
Redlock round (who agreed, whether a quorum is won or lost, the validity left), the
classification of failures into transient and permanent, and the decoding of replies under
RESP2 and RESP3. It follows relock-client (client/src/round.rs, validity.rs, limits.rs,
error.rs) rule for rule."""

from __future__ import annotations

import os
import random
import secrets
import socket
from dataclasses import dataclass, field
from typing import Any, Generic, Mapping, Sequence, TypeVar

import redis.exceptions as rex

from .errors import (
    InvalidArgument,
    LockLost,
    NotAcquired,
    OtherLimit,
    OtherMode,
    RelockError,
    ServerError,
)

#: Default lease, in seconds (relock-client's and lockctl's).
DEFAULT_TTL = 30.0
#: How long one server may take to answer one command: 100 ms.
DEFAULT_NODE_TIMEOUT = 0.1
#: The mean pause between two Redlock rounds of a wait, drawn from half to 1.5 times it.
DEFAULT_RETRY_DELAY = 0.2
#: How long a Redlock wait keeps a minority of grants while it waits for a quorum.
DEFAULT_MAX_PARTIAL_HOLD = 0.5
#: The largest ttl_ms and timeout_ms the LOCK.* commands accept: 10^12 ms.
MAX_MS = 1_000_000_000_000
#: The largest LIMIT the module accepts.
MAX_LIMIT = 1_000_000
#: Owners are at most this many bytes.
MAX_OWNER = 256

#: A sentinel: the default owner prefix, ``<host>/<pid>``.
HOST_PID = object()


def check_ttl(ttl: float) -> int:
    """A ttl in seconds as the ``ttl_ms`` sent: whole milliseconds, 1 to 10^12."""
    try:
        ms = int(ttl * 1000)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgument(f"invalid ttl {ttl!r} (must be 1 ms to 10^12 ms)") from None
    if not 1 <= ms <= MAX_MS:
        raise InvalidArgument(f"invalid ttl {ttl!r} s (must be 0.001 s to 10^9 s)")
    return ms


def check_wait(wait: float | None) -> float | None:
    """A wait limit in seconds: None (no limit), 0 (try once) or positive, at most 10^9 s."""
    if wait is None:
        return None
    if not isinstance(wait, (int, float)) or wait != wait or wait < 0:
        raise InvalidArgument(f"invalid wait {wait!r} (None, 0 or a positive number of seconds)")
    return min(float(wait), MAX_MS / 1000)


def wait_ms(remaining: float | None) -> int:
    """What is left of a wait as LOCK.WAIT's timeout_ms: 0 (no limit) for None, else
    1 to 10^12 (a positive remainder below 1 ms still waits 1 ms rather than forever)."""
    if remaining is None:
        return 0
    return max(1, min(MAX_MS, int(remaining * 1000)))


def mode_args(shared: bool, limit: int | None) -> list[str]:
    """The words after an acquiring command's arguments: none, SHARED, SHARED LIMIT n."""
    if limit is not None:
        return ["SHARED", "LIMIT", str(limit)]
    return ["SHARED"] if shared else []


def check_mode(shared: bool, limit: int | None, masters: int) -> None:
    """A limit in 1 .. 10^6, and never over several independent masters."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"invalid limit {limit!r} (must be 1 to {MAX_LIMIT})")
    if masters > 1:
        raise InvalidArgument(
            f"a limit ({limit}) needs one server or a Redis Cluster, not {masters} independent "
            "masters: a quorum cannot count permits (with limit 2 on masters A, B and C, three "
            "clients can hold {A,B}, {B,C} and {A,C}); a shared lock without a limit is sound "
            "over a quorum"
        )


_NS = 1_000_000_000


def drift(ttl: float) -> float:
    """The clock drift allowed for a lock of ``ttl`` seconds: 1 % plus 2 ms."""
    return ttl / 100 + 0.002


def validity(ttl: float, elapsed: float) -> float | None:
    """What is left of ``ttl`` after a round that took ``elapsed``: ttl - elapsed - drift,
    or None when nothing is left. Counted in whole nanoseconds, so that a round that used up
    exactly the ttl less the drift leaves nothing, not a rounding error's worth."""
    ttl_ns = round(ttl * _NS)
    left = ttl_ns - round(max(0.0, elapsed) * _NS) - (ttl_ns // 100 + 2_000_000)
    return left / _NS if left > 0 else None


def loss_lead(ttl: float) -> float:
    """How long before the end of its validity a hold is reported lost: ttl/20, at most
    20 ms, so that a body woken by the signal still runs within the validity."""
    return min(ttl / 20, 0.02)


def jitter(delay: float) -> float:
    """A random pause in [delay/2, delay*3/2]."""
    return delay / 2 + random.random() * delay


def make_owner(prefix: object = HOST_PID) -> str:
    """A fresh owner: ``<prefix>/<random>``, the prefix being ``<host>/<pid>`` unless given
    (an empty prefix gives the random part alone). The random part (128 bits) keeps two
    holders from ever sharing an owner; the prefix is cut to fit 256 bytes, never it."""
    rand = secrets.token_hex(16)
    if prefix is HOST_PID:
        text = f"{socket.gethostname()}/{os.getpid()}"
    elif isinstance(prefix, str):
        text = prefix
    else:
        raise InvalidArgument(f"owner_prefix must be a str, not {type(prefix).__name__}")
    if not text:
        return rand
    room = MAX_OWNER - len(rand) - 1
    raw = text.encode("utf-8")[:room].decode("utf-8", "ignore")
    return f"{raw}/{rand}"


# --- replies ---------------------------------------------------------------------------------


def text(value: Any) -> str | None:
    """A bulk string reply as str (bytes decoded as UTF-8, bad bytes replaced)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def as_map(reply: Any) -> dict[str, Any]:
    """A map reply as a dict with str keys: a native map under RESP3, a flat
    [name, value, ...] list under RESP2."""
    if isinstance(reply, Mapping):
        items = list(reply.items())
    else:
        seq = list(reply)
        items = list(zip(seq[0::2], seq[1::2]))
    return {text(k) or "": v for k, v in items}


@dataclass(frozen=True)
class LockInfo:
    """LOCK.INFO on one server. For a shared key ``owner``, ``token`` and ``count`` are None."""

    server: str
    owner: str | None
    token: int | None
    count: int | None
    ttl: float
    """Seconds left (of the latest lease for a shared key; -0.001 when PERSISTed)."""
    waiters: int
    mode: str
    holders: int
    limit: int
    """1 for exclusive, n for a semaphore, 0 for a read lock without limit."""


@dataclass(frozen=True)
class Holder:
    """One holder of a key on one server (LOCK.HOLDERS)."""

    server: str
    owner: str
    token: int
    count: int
    ttl: float


@dataclass(frozen=True)
class Waiter:
    """One client queued for a key on one server (LOCK.WAITERS), in queue order."""

    server: str
    owner: str
    mode: str
    limit: int
    permits: int
    client: int
    waited: float
    timeout: float | None
    ttl: float


def _int(v: Any, default: int = 0) -> int:
    if v is None:
        return default
    return int(v)


def parse_info(server: str, reply: Any) -> LockInfo | None:
    if reply is None:
        return None
    m = as_map(reply)
    return LockInfo(
        server=server,
        owner=text(m.get("owner")),
        token=None if m.get("token") is None else int(m["token"]),
        count=None if m.get("count") is None else int(m["count"]),
        ttl=_int(m.get("ttl")) / 1000,
        waiters=_int(m.get("waiters")),
        mode=text(m.get("mode")) or "exclusive",
        holders=_int(m.get("holders"), 1),
        limit=_int(m.get("limit"), 1),
    )


def parse_holders(server: str, reply: Any) -> list[Holder]:
    if reply is None:
        return []
    out = []
    for entry in reply:
        m = as_map(entry)
        out.append(
            Holder(
                server=server,
                owner=text(m.get("owner")) or "",
                token=_int(m.get("token")),
                count=_int(m.get("count"), 1),
                ttl=_int(m.get("ttl")) / 1000,
            )
        )
    return out


def parse_waiters(server: str, reply: Any) -> list[Waiter]:
    out = []
    for entry in reply or []:
        m = as_map(entry)
        timeout = _int(m.get("timeout"), -1)
        out.append(
            Waiter(
                server=server,
                owner=text(m.get("owner")) or "",
                mode=text(m.get("mode")) or "exclusive",
                limit=_int(m.get("limit"), 1),
                permits=_int(m.get("permits"), 1),
                client=_int(m.get("client")),
                waited=_int(m.get("waited")) / 1000,
                timeout=None if timeout < 0 else timeout / 1000,
                ttl=_int(m.get("ttl")) / 1000,
            )
        )
    return out


def parse_history(reply: Any, owner: str) -> str | None:
    """The reason (``expired``, ``forcereleased``, ...) of ``owner``'s newest entry in a
    LOCK.HISTORY reply, if it has one."""
    for entry in reply or []:
        m = as_map(entry)
        if text(m.get("owner")) == owner:
            return text(m.get("reason"))
    return None


# --- failures --------------------------------------------------------------------------------

_TRANSIENT_CODES = {
    "BUSY",
    "MISCONF",
    "NOREPLICAS",
    "UNBLOCKED",
    "NOTREADY",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "LOADING",
    "READONLY",
    "OOM",
    "TRYAGAIN",
    "MOVED",
    "ASK",
}


# The transient replies redis-py raises as classes of their own (older versions do not give
# the error code as ``status_code``).
_TRANSIENT_ERRORS = (
    rex.BusyLoadingError,
    rex.ReadOnlyError,
    rex.OutOfMemoryError,
    rex.TryAgainError,
    rex.ClusterDownError,
    rex.MasterDownError,
    rex.MovedError,
    rex.AskError,
)


@dataclass
class Failure:
    """Why one server did not do what was asked: ``refused`` (nil: another owner's, or no
    longer ours) or an error, ``permanent`` when retrying cannot help."""

    message: str
    refused: bool = False
    permanent: bool = False
    timeout: bool = False
    other_limit: int | None = None
    other_mode: bool = False

    @staticmethod
    def refusal() -> Failure:
        return Failure("not granted (held by another owner or not held by us)", refused=True)


def error_text(e: BaseException) -> str:
    """An error reply's text, without the ``ERR `` prefix older redis-py versions keep."""
    msg = str(e)
    return msg[4:] if msg.startswith("ERR ") else msg


def classify(e: BaseException) -> Failure:
    """The one place that decides whether a failure is permanent (see NodeFailure in
    relock-client): refused logins, permissions, WRONGTYPE, unknown commands and refused
    arguments are; timeouts, lost connections and a busy, loading or failing-over server
    are not."""
    msg = error_text(e)
    if isinstance(e, rex.TimeoutError):
        return Failure(f"no reply in time ({msg})" if msg else "no reply in time", timeout=True)
    if isinstance(e, (rex.AuthenticationError, rex.NoPermissionError)):
        return Failure(f"{msg} (check the user and password)", permanent=True)
    if isinstance(e, rex.ConnectionError):
        return Failure(msg or type(e).__name__)
    if isinstance(e, _TRANSIENT_ERRORS):
        return Failure(msg)
    if isinstance(e, rex.ResponseError):
        # The text goes on to name LOCK.DOWNGRADE since the module has one.
        if msg.startswith("lock is held in another mode"):
            return Failure(
                "the owner holds the lock in the other mode there (no upgrade or downgrade)",
                permanent=True,
                other_mode=True,
            )
        if msg.startswith("lock has another limit (") and msg.endswith(")"):
            try:
                n = int(msg[len("lock has another limit (") : -1])
            except ValueError:
                n = -1
            if n >= 0:
                return Failure(
                    f"the lock has another limit there ({n}; 0 means none)",
                    permanent=True,
                    other_limit=n,
                )
        code = msg.split(" ", 1)[0]
        status = getattr(e, "status_code", None)
        if code in _TRANSIENT_CODES or status in _TRANSIENT_CODES:
            return Failure(msg)
        if msg.startswith("max number of clients reached"):
            return Failure(msg)
        if msg.startswith("unknown command") and any(c in msg.upper() for c in ("LOCK.WAITERS", "LOCK.HISTORY", "LOCK.LOG")):
            msg += " (this relock module is older than that command)"
        elif msg.startswith("unknown command") and "LOCK." in msg.upper():
            msg += " (is the relock module loaded on this server?)"
        return Failure(msg, permanent=True)
    if isinstance(e, rex.RedisError):
        return Failure(msg or type(e).__name__)
    if isinstance(e, OSError):
        return Failure(msg or type(e).__name__)
    return Failure(f"{type(e).__name__}: {msg}", permanent=True)


def is_unknown_command(e: BaseException) -> bool:
    return isinstance(e, rex.ResponseError) and error_text(e).startswith("unknown command")


# --- the round -------------------------------------------------------------------------------


def quorum(n: int) -> int:
    return n // 2 + 1


T = TypeVar("T")


@dataclass
class Round(Generic[T]):
    """One Redlock round: the servers' replies, fed in as they come, decide whether a quorum
    is won or lost. ``until_all`` rounds (releases) wait for every server."""

    names: Sequence[str]
    started: float
    until_all: bool = False
    agreed: dict[int, T] = field(default_factory=dict)
    answered: set[int] = field(default_factory=set)
    failures: list[tuple[int, Failure]] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def n(self) -> int:
        return len(self.names)

    def progress(self) -> str:
        """``pending``, ``won`` or ``lost``."""
        if self.until_all and len(self.answered) < self.n:
            return "pending"
        if len(self.agreed) >= quorum(self.n):
            return "won"
        if len(self.failures) + quorum(self.n) > self.n:
            return "lost"
        return "pending"

    def on_reply(self, i: int, value: T | None, failure: Failure | None = None) -> str:
        """Takes server ``i``'s answer: ``value`` when it agreed, else ``failure`` (None
        with no failure means it refused). A late or second answer changes nothing."""
        progress = self.progress()
        if progress != "pending" or i in self.answered or not 0 <= i < self.n:
            return progress
        self.answered.add(i)
        if failure is not None:
            self.failures.append((i, failure))
        elif value is None:
            self.failures.append((i, Failure.refusal()))
        else:
            self.agreed[i] = value
        return self.progress()

    def finish(self, now: float) -> Round[T]:
        self.elapsed = max(0.0, now - self.started)
        return self

    def won(self) -> bool:
        return len(self.agreed) >= quorum(self.n)

    def refused(self) -> int:
        return sum(1 for _, f in self.failures if f.refused)

    def permanent(self) -> int:
        return sum(1 for _, f in self.failures if f.permanent)

    def some_failed(self) -> bool:
        return self.refused() < len(self.failures)

    def permanently_failed(self) -> bool:
        return self.permanent() + quorum(self.n) > self.n

    def may_hold(self) -> list[bool]:
        """Per server, whether it may hold a grant of this round (all but those that failed
        permanently)."""
        out = [True] * self.n
        for i, f in self.failures:
            if f.permanent:
                out[i] = False
        return out

    def agreed_by(self) -> list[bool]:
        return [i in self.agreed for i in range(self.n)]

    def valid_until(self, ttl: float) -> float | None:
        """The round's start plus its validity, when a quorum agreed in time."""
        if not self.won():
            return None
        v = validity(ttl, self.elapsed)
        return None if v is None else self.started + v

    def granted_late(self, ttl: float) -> bool:
        """A quorum granted, but the round took so long (a wait) that what it leaves of the
        ttl is under two thirds: the ttl ran from grants the client did not see, so the
        validity is measured again with a renewal round."""
        until = self.valid_until(ttl)
        return self.won() and (until is None or until - self.started < ttl * 2 / 3)

    def give_back(self) -> tuple[list[bool], list[bool]]:
        """Where a failed acquisition is released: now, the servers that granted; later (in
        the background, now and once more a little after), those where a grant may still
        land: every server that neither granted, refused, nor failed permanently (a request
        still under way when the round was decided, or one that timed out)."""
        now = self.agreed_by()
        refused = {i for i, f in self.failures if f.refused}
        later = [m and not g and i not in refused for i, (m, g) in enumerate(zip(self.may_hold(), now))]
        return now, later

    def after_failed(
        self, key: str, ttl: float, wait: float | None, deadline_passed: bool, bounded: bool
    ) -> RelockError | None:
        """What an acquisition round without validity means, once its grants are given back:
        the error to raise, or None to try again after a pause. Permanent failures that leave
        no quorum end it at once; so does the deadline; so does a single server that only
        refused a bounded request (``bounded``: a try or a wait with a limit, which the server
        itself timed out). A wait without a limit, or a round some server failed, goes on."""
        if self.permanently_failed():
            return self.permanent_error(key)
        failure = self.acquire_error(key, ttl, wait)
        if deadline_passed:
            return failure
        if self.n == 1 and bounded and not self.some_failed():
            return failure
        return None

    def describe(self, keep: Any = None) -> str:
        parts = [
            f"{self.names[i]}: {f.message}"
            for i, f in self.failures
            if keep is None or keep(f)
        ]
        return "; ".join(parts) or "no server failed"

    def servers(self, keep: Any = None) -> list[str]:
        return [self.names[i] for i, f in self.failures if keep is None or keep(f)]

    def permanent_error(self, key: str) -> RelockError:
        for i, f in self.failures:
            if f.other_limit is not None:
                return OtherLimit(
                    f"lock {key!r} on {self.names[i]}: it has another limit there "
                    f"({f.other_limit}; 0 means none)",
                    key=key,
                    servers=[self.names[i]],
                    limit=f.other_limit,
                )
            if f.other_mode:
                return OtherMode(
                    f"lock {key!r} on {self.names[i]}: the owner holds it in the other mode "
                    "(no upgrade or downgrade)",
                    key=key,
                    servers=[self.names[i]],
                    retryable=False,
                )
        perm = lambda f: f.permanent  # noqa: E731
        return ServerError(
            f"lock {key!r}: {self.describe(perm)} (retrying cannot help)",
            key=key,
            servers=self.servers(perm),
            retryable=False,
        )

    def acquire_error(self, key: str, ttl: float, waited: float | None = None) -> RelockError:
        """Why an acquisition round gave no validity."""
        if self.won():
            return NotAcquired(
                f"lock {key!r}: quorum reached after {self.elapsed:.3f} s, leaving no validity "
                f"of the {ttl} s ttl",
                key=key,
            )
        if self.permanently_failed():
            return self.permanent_error(key)
        if self.n == 1 and not self.some_failed():
            within = "" if not waited else f" within {waited:g} s"
            return NotAcquired(f"lock {key!r} is held by another owner{within}", key=key)
        if waited and not self.some_failed():
            return NotAcquired(f"lock {key!r}: not acquired within {waited:g} s", key=key)
        return NotAcquired(
            f"lock {key!r}: no quorum, {len(self.agreed)} of {self.n} servers granted, "
            f"{quorum(self.n)} needed ({self.describe()})",
            key=key,
            servers=self.servers(lambda f: not f.refused),
        )

    def renew_verdict(self) -> str:
        """After a renewal round without validity: ``lost`` when servers said the lock is no
        longer ours (or failed permanently) so that no quorum can renew, else ``retry``."""
        if (
            not self.won()
            and (self.refused() > 0 or self.permanent() > 0)
            and self.refused() + self.permanent() + quorum(self.n) > self.n
        ):
            return "lost"
        return "retry"


def lost_error(key: str, reason: str, cause: str | None, servers: Sequence[str] = ()) -> LockLost:
    return LockLost(f"lock {key!r} was lost: {reason}", key=key, servers=servers, reason=reason, cause=cause)


def server_error(key: str | None, server: str, e: BaseException) -> ServerError:
    """An error of a single-server query (info, holders, waiters)."""
    f = classify(e)
    about = f"lock {key!r} on {server}" if key is not None else server
    hint = " (retrying cannot help)" if f.permanent else ""
    return ServerError(f"{about}: {f.message}{hint}", key=key, servers=[server], retryable=not f.permanent)


def describe_cause(cause: str | None) -> str:
    """What LOCK.HISTORY's reason means, for a loss message."""
    return {
        "expired": "its lease ran out on the server",
        "forcereleased": "an operator broke it (LOCK.FORCERELEASE)",
        "deleted": "its key was deleted or overwritten",
        "evicted": "the server evicted its key (maxmemory)",
        "revoked": "the grant was revoked",
        "restored": "its key was replaced by RESTORE or COPY",
        "moved": "its key was renamed or moved",
        "flushed": "the database was flushed",
        "swapped": "the database was swapped",
    }.get(cause or "", cause or "")


def server_name(host: Any, port: Any, path: Any = None) -> str:
    if path:
        return str(path)
    h = str(host)
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"{h}:{port}"
