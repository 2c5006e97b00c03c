"""What the sync and asyncio clients share, with no I/O: defaults and limits, owners, the
Redlock round (who agreed, whether a quorum is won or lost, the validity left), the
classification of failures into transient and permanent, and the decoding of replies under
RESP2 and RESP3. It follows relock-client (client/src/round.rs, validity.rs, limits.rs,
error.rs) rule for rule."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import numbers
import os
import random
import re
import secrets
import socket
from dataclasses import dataclass, field
from typing import Any, Generic, Mapping, Sequence, TypeVar

import redis.exceptions as rex

from .errors import (
    InvalidArgument,
    LockLost,
    NotAcknowledged,
    NotAcquired,
    OtherLimit,
    OtherMode,
    OtherPermits,
    RelockError,
    ServerError,
    StaleToken,
)

#: Default lease, in seconds (relock-client's and lockctl's).
DEFAULT_TTL = 30.0
#: How long one server may take to answer one command: 100 ms.
DEFAULT_NODE_TIMEOUT = 0.1
#: The mean pause between two Redlock rounds of a wait, drawn from half to 1.5 times it.
DEFAULT_RETRY_DELAY = 0.2
#: How long a Redlock wait keeps a minority of grants while it waits for a quorum.
DEFAULT_MAX_PARTIAL_HOLD = 0.5
#: How long a master waits for ``replica_acks`` acknowledgements (``WAIT``): 500 ms.
DEFAULT_REPLICA_ACK_TIMEOUT = 0.5
#: The largest ttl_ms and timeout_ms the LOCK.* commands accept: 10^12 ms.
MAX_MS = 1_000_000_000_000
#: The largest LIMIT the module accepts.
MAX_LIMIT = 1_000_000
#: Owners are at most this many bytes.
MAX_OWNER = 256
#: The smallest usable ttl in milliseconds (relock-client's MIN_TTL): the least ttl whose
#: validity after the drift allowance (1 % + 2 ms) is at least half of it. 1 and 2 ms leave
#: no validity at all (every acquisition would fail, and a wait would start again forever);
#: 3 and 4 ms leave less than a renewal needs.
MIN_TTL_MS = 5

#: relock's logger (a renewal counted with fewer replica acknowledgements than asked).
log = logging.getLogger("relock")

#: A sentinel: the default owner prefix, ``<host>/<pid>``.
HOST_PID = object()


def check_ttl(ttl: float) -> int:
    """A ttl in seconds as the ``ttl_ms`` sent: whole milliseconds, 5 (``MIN_TTL_MS``) to
    10^12. A bool (``True`` would be 1 s) or a string is a mistake, refused."""
    if isinstance(ttl, bool) or not isinstance(ttl, numbers.Real):
        raise InvalidArgument(f"invalid ttl {ttl!r} (a number of seconds, 0.005 to 10^9)")
    try:
        ms = int(ttl * 1000)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgument(f"invalid ttl {ttl!r} (must be 5 ms to 10^12 ms)") from None
    if ttl > 0 and ms < MIN_TTL_MS:
        raise InvalidArgument(
            f"invalid ttl {ttl!r} s: the smallest usable ttl is {MIN_TTL_MS} ms (0.005 s), since "
            "the drift allowance of 1 % + 2 ms leaves less than half of a shorter one valid"
        )
    if not MIN_TTL_MS <= ms <= MAX_MS:
        raise InvalidArgument(f"invalid ttl {ttl!r} s (must be 0.005 s to 10^9 s)")
    return ms


def check_pause(name: str, value: Any) -> float:
    """A pause setting (``retry_delay``, ``max_partial_hold``): a finite number of seconds,
    0 or more (a negative or NaN one made every wait fail in ``time.sleep``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) < float("inf"):
        raise InvalidArgument(f"invalid {name} {value!r} (a finite number of seconds, 0 or more)")
    return float(value)


def check_wait(wait: float | None) -> float | None:
    """A wait limit in seconds: None (no limit), 0 (try once) or positive, at most 10^9 s."""
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, numbers.Real) or wait != wait or wait < 0:
        raise InvalidArgument(f"invalid wait {wait!r} (None, 0 or a positive number of seconds)")
    return min(float(wait), MAX_MS / 1000)


def wait_ms(remaining: float | None) -> int:
    """What is left of a wait as LOCK.WAIT's timeout_ms: 0 (no limit) for None, else
    1 to 10^12 (a positive remainder below 1 ms still waits 1 ms rather than forever)."""
    if remaining is None:
        return 0
    return max(1, min(MAX_MS, int(remaining * 1000)))


def mode_args(shared: bool, limit: int | None, permits: int | None = None) -> list[str]:
    """The words after an acquiring command's arguments: none, SHARED, SHARED LIMIT n,
    SHARED LIMIT n PERMITS p."""
    if limit is not None:
        return ["SHARED", "LIMIT", str(limit)] + ([] if permits is None else ["PERMITS", str(permits)])
    return ["SHARED"] if shared else []


def check_mode(shared: bool, limit: int | None, masters: int, permits: int | None = None) -> None:
    """A limit in 1 .. 10^6, never over several independent masters, and permits (1 to the
    limit) only with a limit."""
    if permits is not None:
        if limit is None:
            raise InvalidArgument(f"permits={permits!r} needs a limit: several permits are taken of a semaphore")
        if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= limit:
            raise InvalidArgument(f"invalid permits {permits!r} (must be 1 to the limit, {limit})")
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
_HOLD_COUNT = re.compile(r"hold count is (\d+), not \d+")


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
    try:
        raw = text.encode("utf-8")[:room].decode("utf-8", "ignore")
    except UnicodeEncodeError:
        raise InvalidArgument(f"owner_prefix {text[:60]!r} is not valid UTF-8 text (a lone surrogate)") from None
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
    elif isinstance(reply, (list, tuple)):
        seq = list(reply)
        items = list(zip(seq[0::2], seq[1::2]))
    else:  # not a map at all (a bad reply): no fields
        items = []
    return {text(k) or "": v for k, v in items}


@dataclass(frozen=True)
class Who:
    """Who ended a hold, as ``LOCK.HISTORY``'s ``client-info`` shows it (the fields of
    ``CLIENT LIST``): known for ``LOCK.FORCERELEASE`` always, for other commands where the
    server lets the module see the caller."""

    client: int | None
    """The connection's id (``CLIENT ID``)."""
    name: str | None
    """Its ``CLIENT SETNAME`` name, None when it has none."""
    user: str | None
    addr: str | None
    command: str | None
    """The command it ran (``cmd=``), as Redis shows it."""

    def __str__(self) -> str:
        parts = [f"{k} {v}" for k, v in (("name", self.name), ("user", self.user), ("addr", self.addr)) if v]
        who = "a client" if self.client is None else f"client {self.client}"
        return f"{who} ({', '.join(parts)})" if parts else who


def parse_who(info: Any) -> Who | None:
    """``client-info`` (``id=7 addr=... name=ops ... user=admin ...``), None when empty."""
    raw = text(info) or ""
    if not raw.strip():
        return None
    fields: dict[str, str] = {}
    for part in raw.split(" "):
        k, sep, v = part.partition("=")
        if sep:
            fields[k] = v
    client = fields.get("id")
    return Who(
        client=int(client) if client and client.isdigit() else None,
        name=fields.get("name") or None,
        user=fields.get("user") or None,
        addr=fields.get("addr") or None,
        command=fields.get("cmd") or None,
    )


@dataclass(frozen=True)
class LogEntry:
    """One entry of the server's journal of holds that ended other than by their owner
    (``LOCK.LOG``, ``LOCK.HISTORY``). A flush or a swap is one entry with an empty ``key``
    and ``owner``."""

    server: str
    id: int
    time: float
    """When it ended, Unix seconds (the server's clock)."""
    db: int
    key: str
    owner: str
    token: int
    reason: str
    """``expired``, ``forcereleased``, ``deleted``, ``evicted``, ``revoked``, ``restored``,
    ``moved``, ``flushed``, ``swapped`` (or a newer module's word)."""
    held: float | None
    """Seconds from grant to end; None for holds granted before the server started."""
    who: Who | None
    waiters: int


def parse_log(server: str, reply: Any) -> list[LogEntry]:
    out: list[LogEntry] = []
    if not isinstance(reply, (list, tuple)):
        return out
    for entry in reply:
        m = as_map(entry)
        held = m.get("held")
        held_s = None if held in (None, b"", "") else _int(held) / 1000
        out.append(
            LogEntry(
                server=server,
                id=_int(m.get("id")),
                time=_int(m.get("time")) / 1000,
                db=_int(m.get("db")),
                key=text(m.get("key")) or "",
                owner=text(m.get("owner")) or "",
                token=_int(m.get("token")),
                reason=text(m.get("reason")) or "",
                held=held_s,
                who=parse_who(m.get("client-info")),
                waiters=_int(m.get("waiters")),
            )
        )
    return out


@dataclass(frozen=True)
class LossReason:
    """Why a hold was lost, from the server's journal (``LOCK.HISTORY``): ``cause`` is its
    word (``expired``, ``forcereleased``, ``deleted``, ``flushed``, ...), ``who`` the client
    that ended it where the server could tell, ``entry`` the journal entry; ``message`` says
    it in words. ``cause`` is None when the journal had nothing on it (a failover, a restart,
    a journal that is off or full): then nobody can say why."""

    cause: str | None
    who: Who | None
    message: str
    entry: LogEntry | None = None

    def __str__(self) -> str:
        return self.message


#: Said when LOCK.HISTORY has no entry for a lost hold.
UNKNOWN_LOSS = (
    "the server's journal (LOCK.HISTORY) has nothing on it, so it cannot say why "
    "(a failover or restart empties it; relock.log-max-len 0 turns it off)"
)


def loss_reason(entries: Sequence[LogEntry], owner: str, since: float, now: float | None = None) -> LossReason:
    """The reason of ``owner``'s loss from LOCK.HISTORY entries (newest first): its newest
    entry, or a flush or swap (entries without a key, which end every hold) at or after
    ``since`` (Unix seconds, when the hold was granted)."""
    for e in entries:
        if e.owner == owner or (not e.key and not e.owner and e.time >= since - 1.0):
            return LossReason(e.reason, e.who, describe_loss(e, now), e)
    return LossReason(None, None, UNKNOWN_LOSS)


def describe_loss(e: LogEntry, now: float | None = None) -> str:
    """An entry in words: ``force-released by client 17 (name ops, user admin) 1.2 s ago``."""
    what = {
        "expired": "expired on the server",
        "forcereleased": "force-released (LOCK.FORCERELEASE)",
        "deleted": "deleted (DEL, UNLINK, GETDEL, or the key overwritten by another value)",
        "evicted": "evicted by the server (maxmemory)",
        "revoked": "revoked (its waiter hung up before the grant reached it)",
        "restored": "replaced by RESTORE or COPY ... REPLACE",
        "moved": "moved away (RENAME, MOVE or MIGRATE)",
        "flushed": "flushed with its database (FLUSHDB or FLUSHALL)",
        "swapped": "swapped out with its database (SWAPDB)",
    }.get(e.reason, e.reason or "ended")
    if e.reason == "expired" and e.held is not None:
        what += f": not renewed in time, after {e.held:g} s held"
    if e.who is not None:
        what += f" by {e.who}"
    if now is not None and e.time > 0:
        what += f" {max(0.0, now - e.time):.1f} s ago"
    return what


@dataclass(frozen=True)
class KeyStats:
    """One of the hottest keys by total wait time on one server (``LOCK.STATS``), from an
    approximate top-k: ``wait_ms_total`` may be over by up to ``error`` ms."""

    server: str
    key: str
    waits: int
    granted: int
    timeouts: int
    contended: int
    wait_ms_total: int
    error: int
    wait_ms_max: int


def parse_stats(server: str, reply: Any) -> list[KeyStats]:
    out: list[KeyStats] = []
    if not isinstance(reply, (list, tuple)):
        return out
    for entry in reply:
        m = as_map(entry)
        out.append(
            KeyStats(
                server=server,
                key=text(m.get("key")) or "",
                waits=_int(m.get("waits")),
                granted=_int(m.get("granted")),
                timeouts=_int(m.get("timeouts")),
                contended=_int(m.get("contended")),
                wait_ms_total=_int(m.get("wait_ms_total")),
                error=_int(m.get("error")),
                wait_ms_max=_int(m.get("wait_ms_max")),
            )
        )
    return out


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
    permits_free: int = 0
    """Permits a semaphore has free (0 for an exclusive key and a read lock)."""


@dataclass(frozen=True)
class Holder:
    """One holder of a key on one server (LOCK.HOLDERS)."""

    server: str
    owner: str
    token: int
    count: int
    ttl: float
    permits: int = 1


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
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


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
        permits_free=_int(m.get("permits_free")),
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
                permits=_int(m.get("permits"), 1),
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
    other_permits: bool = False
    grace: bool = False
    """The server is in its restart grace (TRYAGAIN): it grants nothing new yet. Not a
    refusal and not an error: the request is retried, and in a Redlock round it is a
    no-vote."""
    bad_ttl: bool = False
    """The server refused the ttl asked for (``ttl_ms exceeds relock.restart-grace-ms``) and
    changed nothing: permanent for that ttl, but a hold it was asked to renew is still held."""
    acks: tuple[int, int, str | None] | None = None
    """(acknowledged, wanted, master): the write was done, but fewer replicas than
    ``replica_acks`` acknowledged it (``WAIT``); a grant (a re-entry's level) was taken back
    again there. ``master`` is the cluster node that served the key (None: the server itself).
    Not permanent."""
    settled: bool = False
    """What the request did there is known to be undone (an acknowledgement failure whose
    take-back was answered): nothing is to be given back there, now or later (``give_back``,
    ``unanswered``): a give-back repeated later could end a new grant of the same owner."""

    @staticmethod
    def refusal() -> Failure:
        return Failure("not granted (held by another owner or not held by us)", refused=True)


def error_text(e: BaseException) -> str:
    """An error reply's text, without the ``ERR `` prefix older redis-py versions keep."""
    msg = str(e)
    return msg[4:] if msg.startswith("ERR ") else msg


def classify(e: BaseException, cluster: bool = False) -> Failure:
    """The one place that decides whether a failure is permanent (see NodeFailure in
    relock-client): refused logins, permissions, WRONGTYPE, unknown commands, refused
    arguments, arguments redis-py cannot send, and a redirection (MOVED, ASK) from a cluster
    node asked as a plain server (``cluster`` False) are; timeouts, lost connections and a
    busy, loading or failing-over server are not."""
    msg = error_text(e)
    if not cluster and (isinstance(e, (rex.MovedError, rex.AskError)) or msg.startswith(("MOVED ", "ASK "))):
        if not msg.startswith(("MOVED", "ASK")):  # redis-py keeps only the slot and address
            msg = f"{'MOVED' if isinstance(e, rex.MovedError) else 'ASK'} {msg}"
        return Failure(
            f"{msg}: the server is a Redis Cluster node, asked as a plain server (pass a "
            "redis.cluster.RedisCluster, or redis.asyncio.cluster.RedisCluster)",
            permanent=True,
        )
    if isinstance(e, rex.DataError):
        return Failure(f"redis-py cannot send the arguments: {msg}", permanent=True)
    if isinstance(e, rex.NoPermissionError) or (isinstance(e, rex.ResponseError) and msg.startswith("NOPERM")):
        if not msg.startswith("NOPERM"):  # redis-py drops the code
            msg = f"NOPERM {msg}"
        return Failure(f"{msg} (the user's ACL does not allow it)", permanent=True)
    if "restart grace" in msg and (isinstance(e, rex.TryAgainError) or msg.startswith("TRYAGAIN")):
        left = msg[len("TRYAGAIN ") :] if msg.startswith("TRYAGAIN ") else msg
        return Failure(f"in its restart grace, granting nothing new yet ({left})", grace=True)
    if isinstance(e, (rex.TimeoutError, asyncio.TimeoutError, TimeoutError)):
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
        if msg.startswith("lock is held with other permits"):
            return Failure(
                "the owner holds the lock there with another number of permits",
                permanent=True,
                other_permits=True,
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
        if msg.startswith("ttl_ms exceeds"):
            return Failure(msg, permanent=True, bad_ttl=True)
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


def client_list_state(reply: str) -> str:
    """``CLIENT LIST ID n``'s reply as the state of connection n: ``blocked`` (flags hold
    ``b``), ``answered`` (connected, not blocked: its reply was sent), ``gone`` (no line: the
    server no longer has it) or ``unknown``."""
    line = next((l for l in reply.splitlines() if l.strip()), None)
    if line is None:
        return "gone"
    flags = next((f[len("flags=") :] for f in line.split() if f.startswith("flags=")), None)
    if flags is None:
        return "unknown"
    return "blocked" if "b" in flags else "answered"


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

    def add_grant(self, i: int, value: T) -> None:
        """A grant of server ``i`` made after the round was decided (a won wait topped up on
        the servers whose waits were cut): kept with the others, so that the hold is renewed,
        released and fenced with every server that granted."""
        self.answered.add(i)
        self.agreed[i] = value

    def finish(self, now: float) -> Round[T]:
        self.elapsed = max(0.0, now - self.started)
        return self

    def won(self) -> bool:
        return len(self.agreed) >= quorum(self.n)

    def in_grace(self) -> int:
        return sum(1 for _, f in self.failures if f.grace)

    def refused(self) -> int:
        return sum(1 for _, f in self.failures if f.refused)

    def permanent(self) -> int:
        return sum(1 for _, f in self.failures if f.permanent)

    def some_failed(self) -> bool:
        return self.refused() < len(self.failures)

    def bad_ttl(self) -> bool:
        """Whether a server refused the ttl itself (changing nothing)."""
        return any(f.bad_ttl for _, f in self.failures)

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

    def unanswered(self) -> list[bool]:
        """Per server, whether it failed in a way that says nothing of what it did (no reply
        in time, a lost connection): neither a refusal, a permanent error, nor a write known
        to be taken back (``Failure.settled``)."""
        out = [False] * self.n
        for i, f in self.failures:
            out[i] = not f.refused and not f.permanent and not f.settled
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

    def hold_count(self) -> int | None:
        """The count a server said the hold has when a ``FROM c`` step met another
        (``ERR hold count is <n>, not <c>``): n, else None."""
        for _, f in self.failures:
            m = _HOLD_COUNT.search(f.message)
            if m:
                return int(m.group(1))
        return None

    def give_back(self) -> tuple[list[bool], list[bool]]:
        """Where a failed acquisition is released: now, the servers that granted; later (in
        the background, now and once more a little after), those where a grant may still
        land: every server that neither granted, refused, nor failed permanently (a request
        still under way when the round was decided, or one that timed out), but those whose
        grant was taken back already (``Failure.settled``)."""
        now = self.agreed_by()
        refused = {i for i, f in self.failures if f.refused or f.settled}
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
        not_acked = self.acks_error(key)
        if not_acked is not None:
            return not_acked
        failure = self.acquire_error(key, ttl, wait)
        if deadline_passed:
            return failure
        if self.n == 1 and bounded and not self.some_failed():
            return failure
        return None

    def acks_error(self, key: str, what: str = "granted") -> NotAcknowledged | None:
        """An acquisition (a re-entry: ``what``) granted where its replicas did not
        acknowledge it (each such grant was taken back there): ``NotAcknowledged`` naming the master and how many
        acknowledged, when those grants alone kept the round from its quorum; else None. It
        is raised at once, never waited out: the caller decides whether to try again."""
        short = [(i, f) for i, f in self.failures if f.acks is not None]
        if self.won() or not short or len(self.agreed) + len(short) < quorum(self.n):
            return None
        i, f = short[0]
        assert f.acks is not None
        master = f.acks[2] or self.names[i]
        return NotAcknowledged(
            f"lock {key!r}: {what}, but not acknowledged by enough replicas "
            f"({self.describe(lambda f: f.acks is not None)})",
            key=key,
            servers=[self.names[j] for j, _ in short],
            master=master,
            acked=f.acks[0],
            wanted=f.acks[1],
        )

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
            if f.other_permits:
                return OtherPermits(
                    f"lock {key!r} on {self.names[i]}: the owner holds it with another number of "
                    "permits (a hold keeps the permits it was granted)",
                    key=key,
                    servers=[self.names[i]],
                    retryable=False,
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
        if self.in_grace() and not self.agreed and self.in_grace() + self.refused() == len(self.failures):
            return NotAcquired(
                f"lock {key!r}: not granted, {self.describe(lambda f: f.grace)} (retry: the grace ends by itself)",
                key=key,
                servers=self.servers(lambda f: f.grace),
            )
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

    def bad_ttl_error(self, key: str, ttl: float, kept: float) -> ServerError:
        """A renewal whose ttl servers refused (``ttl_ms exceeds relock.restart-grace-ms``):
        they changed nothing, so the hold is kept with its ttl; not retryable as asked."""
        bad = lambda f: f.bad_ttl  # noqa: E731
        return ServerError(
            f"lock {key!r}: renewal to a ttl of {ttl:g} s refused ({self.describe(bad)}); the hold "
            f"is kept, with its ttl of {kept:g} s (retrying cannot help: ask for a shorter ttl)",
            key=key,
            servers=self.servers(bad),
            retryable=False,
        )

    def release_error(self, key: str) -> ServerError | None:
        """What a release that no quorum made means when errors retrying cannot fix
        (``NOPERM``, ``WRONGTYPE``, the module gone) alone leave no quorum, judged as in every
        round: a ``ServerError`` naming them, since the lock stays held there until its ttl
        runs out; None otherwise (the servers said it was no longer held, or a minority failed
        for good while others did not answer: a retry there may still release it)."""
        if self.won() or not self.permanently_failed():
            return None
        perm = lambda f: f.permanent  # noqa: E731
        return ServerError(
            f"lock {key!r}: release refused ({self.describe(perm)}); the lock stays held there "
            "until its ttl runs out (retrying cannot help)",
            key=key,
            servers=self.servers(perm),
            retryable=False,
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


def lost_error(key: str, reason: str, loss: LossReason | None, servers: Sequence[str] = ()) -> LockLost:
    return LockLost(f"lock {key!r} was lost: {reason}", key=key, servers=servers, reason=reason, loss=loss)


def server_error(key: str | None, server: str, e: BaseException) -> ServerError:
    """An error of a single-server query (info, holders, waiters)."""
    f = classify(e)
    about = f"lock {key!r} on {server}" if key is not None else server
    hint = " (retrying cannot help)" if f.permanent else ""
    return ServerError(f"{about}: {f.message}{hint}", key=key, servers=[server], retryable=not f.permanent)


def server_name(host: Any, port: Any, path: Any = None) -> str:
    if path:
        return str(path)
    h = str(host)
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"{h}:{port}"


#: The most keys one LOCK.MACQUIRE takes.
MAX_KEYS = 256


def check_key(key: Any) -> str:
    """A key: a str (a None or a tuple is a mistake, never a lock held by another owner)."""
    if not isinstance(key, str):
        raise InvalidArgument(f"a key must be a str, not {type(key).__name__} ({key!r:.60})")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"key {key[:60]!r} is not valid UTF-8 text (a lone surrogate)") from None
    return key


def check_keys(keys: Any) -> list[str]:
    """The keys of a group: 1 to 256 distinct strings, in the caller's order."""
    if isinstance(keys, (str, bytes)):
        raise InvalidArgument("keys must be a list of keys, not one key (use lock() for one)")
    out = list(keys)
    if not 1 <= len(out) <= MAX_KEYS:
        raise InvalidArgument(f"a group takes 1 to {MAX_KEYS} keys, not {len(out)}")
    if not all(isinstance(k, str) for k in out):
        raise InvalidArgument("every key of a group must be a str")
    for k in out:
        check_key(k)
    if len(set(out)) != len(out):
        dup = next(k for i, k in enumerate(out) if k in out[:i])
        raise InvalidArgument(f"key {dup!r} is named twice in the group")
    return out


def wait_order(keys: Sequence[str]) -> list[str]:
    """The order in which a group's keys are waited for, one by one: by their UTF-8 bytes,
    the same in every relock client, so that two groups that overlap never wait for each
    other in a circle (no deadlock), and FIFO queues keep each wait starvation-free."""
    return sorted(keys, key=lambda k: k.encode("utf-8"))


def group_tokens(keys: Sequence[str], reply: Any) -> dict[str, int] | None:
    """LOCK.MACQUIRE's reply as each key's token, None when it granted nothing."""
    if reply is None:
        return None
    tokens = [int(t) for t in reply]
    if len(tokens) != len(keys):
        raise ValueError(f"LOCK.MACQUIRE answered {len(tokens)} tokens for {len(keys)} keys")
    return dict(zip(keys, tokens))


# --- elections -------------------------------------------------------------------------------

#: How long one LOCK.OBSERVE of ``observe()`` blocks at most, in seconds, unless the driver's
#: socket timeout is shorter (then a half of it): a finite wait, asked again, so that no
#: driver cuts it (redis-py ends a command at ``socket_timeout``).
OBSERVE_EVERY = 5.0


def candidate_owner(value: Any) -> str:
    """A candidate's owner: ``<value>/<32 hex random>``, the value cut (at a UTF-8 character's
    edge) to fit 256 bytes, never the random part."""
    if not isinstance(value, str):
        raise InvalidArgument(f"a candidate's value must be a str, not {type(value).__name__}")
    rand = secrets.token_hex(16)
    room = MAX_OWNER - len(rand) - 1
    try:
        raw = value.encode("utf-8")[:room].decode("utf-8", "ignore")
    except UnicodeEncodeError:
        raise InvalidArgument(f"value {value[:60]!r} is not valid UTF-8 text (a lone surrogate)") from None
    return f"{raw}/{rand}"


def proclaimed(owner: str) -> str:
    """A candidate's proclaimed value: its owner without the last ``/``-separated part."""
    return owner.rsplit("/", 1)[0] if "/" in owner else ""


@dataclass(frozen=True)
class Leader:
    """The leader of an election (``leader()``, ``observe()``): its proclaimed ``value``, its
    ``term`` (the hold's fencing token), the full ``owner``, the lease left (``ttl``, seconds)
    and the candidates queued behind it (``waiters``)."""

    value: str
    term: int
    owner: str
    ttl: float
    waiters: int
    server: str


@dataclass(frozen=True)
class LeaderChange:
    """One item of ``observe()``: the ``leader`` after a change (None: nobody leads), and
    ``term_regressed`` when its term is lower than the last one this observer saw (the store
    lost history: a restart without persistence, a failover to a replica that had not got the
    last grant)."""

    leader: Leader | None
    term_regressed: bool = False

    @property
    def value(self) -> str | None:
        return None if self.leader is None else self.leader.value

    @property
    def term(self) -> int | None:
        return None if self.leader is None else self.leader.term


def check_election(key: str, servers: int, what: str) -> None:
    """Elections run on one master or a cluster, never over Redlock masters."""
    if servers > 1:
        raise InvalidArgument(
            f"{what} {key!r}: elections run on one master or a cluster, not over {servers} Redlock masters "
            "(a term must come from one sequence, and FIFO order does not compose across independent queues)"
        )


def parse_leader(key: str, server: str, reply: Any) -> Leader | None:
    """LOCK.INFO's (or LOCK.OBSERVE's) reply as the leader; a shared key is not an election."""
    info = parse_info(server, reply)
    if info is None:
        return None
    if info.mode != "exclusive" or info.owner is None or info.token is None:
        raise shared_election(key, server)
    return Leader(proclaimed(info.owner), info.token, info.owner, info.ttl, info.waiters, server)


def shared_election(key: str, server: str) -> ServerError:
    return ServerError(
        f"lock {key!r} is shared on {server}: an election is an exclusive lock (its holder is the leader)",
        key=key,
        servers=[server],
        retryable=False,
    )


def observe_every(socket_timeout: Any) -> float:
    """How long one LOCK.OBSERVE may block: ``OBSERVE_EVERY``, or half the driver's socket
    timeout when that is shorter."""
    every = OBSERVE_EVERY
    if isinstance(socket_timeout, (int, float)) and not isinstance(socket_timeout, bool) and socket_timeout > 0:
        every = min(every, float(socket_timeout) / 2)
    return max(every, 0.01)


class Observation:
    """What an observer knows: the token it last saw (``known``, sent with the next
    LOCK.OBSERVE; 0 = no leader) and the largest term it saw. ``see`` turns a reply into the
    change to report, or None when nothing changed (a timeout, a wait cut and asked again)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.known = 0
        self.last_term: int | None = None
        self.started = False

    def see(self, leader: Leader | None) -> LeaderChange | None:
        token = 0 if leader is None else leader.term
        if self.started and token == self.known:
            return None
        self.started = True
        self.known = token
        regressed = leader is not None and self.last_term is not None and leader.term < self.last_term
        if leader is not None:
            self.last_term = leader.term
        return LeaderChange(leader, regressed)


def check_fenced(key: str, servers: int) -> None:
    if servers > 1:
        raise InvalidArgument(
            f"lock {key!r}: fenced() runs on one master or a cluster, not on a Redlock hold "
            f"({servers} masters): each master has its own tokens, so no one token fences them all"
        )


class Unanswered(Exception):
    """A command sent once (``LOCK.FENCED``, ``LOCK.FORCERELEASE``) whose reply never came:
    no reply in time, or its connection ended first. The server may have run it; it is never
    sent again (the send-once rule of spec/client-cases/README.md). ``why`` says which."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


#: Refusals that say a cluster node did not run a command (it may go on to the key's master).
NOT_RUN = (rex.MovedError, rex.AskError, rex.TryAgainError, rex.ClusterDownError, rex.ReadOnlyError, rex.MasterDownError)

#: How many refusals (MOVED, ASK, TRYAGAIN...) a fenced write follows at most.
FENCED_REDIRECTS = 16


def fenced_unanswered(key: str, server: str, e: Unanswered, command: str = "LOCK.FENCED") -> ServerError:
    """A command sent once (a fenced write, a force-release) whose reply was lost: it may
    have run, and was not sent again."""
    return ServerError(f"lock {key!r} on {server}: {command} {e.why} (it may have run; it was not sent again)", key=key, servers=[server])


def fenced_error(key: str, server: str, e: BaseException) -> RelockError:
    """A failed LOCK.FENCED: ``StaleToken`` for a ``FENCED`` error, else as every command's."""
    msg = error_text(e)
    if isinstance(e, rex.ResponseError) and msg.startswith("FENCED"):
        m = re.match(r"FENCED stale token (\d+), current (\S+)", msg)
        return StaleToken(
            f"lock {key!r} on {server}: {msg} (the hold is gone: nothing ran)",
            key=key,
            servers=[server],
            token=int(m.group(1)) if m else 0,
            current=m.group(2) if m else None,
        )
    return server_error(key, server, e)


def unanswered(e: BaseException) -> Unanswered | None:
    """What a command sent once raises when its reply did not come (``e``): a timeout or a
    lost connection is ``Unanswered``; None: ``e`` itself (Ctrl-C or a cancellation stays
    one)."""
    if isinstance(e, (TimeoutError, asyncio.TimeoutError, rex.TimeoutError)):
        return Unanswered("got no reply in time")
    if isinstance(e, (rex.ConnectionError, OSError)):
        return Unanswered(f"lost its connection before its reply ({error_text(e)})")
    return None


def node_of(client: Any, key: str) -> Any:
    """The master of ``key``'s slot in a cluster client's map; None when the map has none."""
    try:
        return client.get_node_from_key(key)
    except rex.SlotNotCoveredError:
        return None


def remap(client: Any, host: str, port: int) -> tuple[str, int]:
    """A redirection's address as the cluster client reaches it (its ``address_remap``)."""
    to = getattr(client.nodes_manager, "remap_host_port", None)
    return to(host, port) if to is not None else (host, port)


# --- replica acknowledgements ----------------------------------------------------------------

#: The writes that wait for replica acknowledgements when ``replica_acks`` asks for them: the
#: acquisitions and the re-entries (a grant or a level not acknowledged is taken back again on
#: that master: ``undo_grant``) and the renewals (a renewal not acknowledged does not count).
ACKED = frozenset({"LOCK.ACQUIRE", "LOCK.WAIT", "LOCK.MACQUIRE", "LOCK.REENTER", "LOCK.RENEW", "LOCK.MRENEW"})
#: Of those, the renewals: nothing is undone when their replicas do not acknowledge them.
RENEWALS = frozenset({"LOCK.RENEW", "LOCK.MRENEW"})


def check_acks(replica_acks: Any, replica_ack_timeout: Any) -> tuple[int, float] | None:
    """The ``replica_acks`` options as ``(replicas, timeout)``, None when off (0)."""
    if isinstance(replica_acks, bool) or not isinstance(replica_acks, int) or replica_acks < 0:
        raise InvalidArgument(f"invalid replica_acks {replica_acks!r} (a number of replicas, 0 or more)")
    timeout = check_pause("replica_ack_timeout", replica_ack_timeout)
    if replica_acks == 0:
        return None
    if timeout < 0.001:
        raise InvalidArgument(f"invalid replica_ack_timeout {replica_ack_timeout!r} (at least 1 ms: WAIT 0 waits forever)")
    return replica_acks, timeout


def wait_args(acks: tuple[int, float]) -> list[Any]:
    """``WAIT replicas timeout_ms`` (at least 1 ms: 0 would wait forever)."""
    return ["WAIT", acks[0], max(1, int(acks[1] * 1000))]


class NotAcked(Exception):
    """A write its master did, whose replicas did not acknowledge it: ``reply`` is the
    write's, ``acked`` how many replicas acknowledged (0 when ``WAIT`` got no answer:
    ``why`` says so)."""

    def __init__(self, reply: Any, acked: int, wanted: int, why: str = "", master: str | None = None) -> None:
        super().__init__(why or f"{acked} of {wanted} replicas acknowledged")
        self.reply = reply
        self.acked = acked
        self.wanted = wanted
        self.why = why
        self.master = master


def acks_failure(e: NotAcked, timeout: float, then: str, settled: bool = False) -> Failure:
    """``then``: what became of the write (``"the renewal does not count"``, ``"the grant
    was released again there"``...); ``settled``: its undo was answered (``Failure.settled``)."""
    why = f" ({e.why})" if e.why else ""
    on = f"master {e.master}: " if e.master else ""
    return Failure(
        f"{on}only {e.acked} of {e.wanted} required replica acknowledgements within {timeout:g} s{why}; {then}",
        acks=(e.acked, e.wanted, e.master),
        settled=settled,
    )


def acked_key(args: Sequence[Any]) -> str:
    """The key that routes a write of ``ACKED`` in a cluster (a group's first key)."""
    return str(args[2] if str(args[0]).upper() in ("LOCK.MACQUIRE", "LOCK.MRENEW") else args[1])


def not_run_here(e: BaseException, acks: Any) -> bool:
    """Whether a refusal of ``NOT_RUN`` is to be answered, not followed: a lock command's
    ``TRYAGAIN`` of the restart grace (the node is the key's master; it grants nothing new
    yet), where a fenced write (``acks`` None) follows every one."""
    return acks is not None and isinstance(e, rex.TryAgainError) and "restart grace" in str(e)


def undo_grant(args: Sequence[Any], reply: Any) -> list[Any]:
    """What takes back, on its master, the step that an acquisition or a re-entry ``args``
    made there (``reply`` its reply), sent with the count it expects (FROM), so that a repeat
    changes nothing: a grant of LOCK.ACQUIRE, LOCK.WAIT (``key owner``) or LOCK.MACQUIRE (``n
    keys... owner``) is a fresh hold, count 1 (``FROM 1``); a re-entry's level is count c+1
    (``LOCK.RELEASE key owner FROM c+1``, c its own ``FROM c``, else the count it replied),
    which leaves the outer hold with its c (``FROM 1`` would end the hold)."""
    cmd = str(args[0]).upper()
    if cmd == "LOCK.MACQUIRE":
        n = int(args[1])
        return ["LOCK.MRELEASE", n, *args[2 : 2 + n], args[2 + n], "FROM", 1]
    if cmd == "LOCK.REENTER":
        after = int(args[-1]) + 1 if len(args) > 5 and str(args[-2]).upper() == "FROM" else int(reply)
        return ["LOCK.RELEASE", args[1], args[2], "FROM", after]
    return ["LOCK.RELEASE", args[1], args[2], "FROM", 1]


def count_step(args: Sequence[Any]) -> tuple[str, str] | None:
    """``(key, owner)`` when ``args`` is a step of a hold's count given back in the background
    (``LOCK.RELEASE key owner FROM c``, c >= 2: a section's exit, a re-entry taken back): a
    section entered before it ended (the give-back is sent once more a little later) would
    ask FROM the same count and have it taken back by it; None for a whole hold (FROM 1)."""
    if len(args) == 5 and str(args[0]).upper() == "LOCK.RELEASE" and str(args[3]).upper() == "FROM":
        with contextlib.suppress(ValueError, TypeError):
            if int(args[4]) >= 2:
                return str(args[1]), str(args[2])
    return None


def connected_replicas(role: Any) -> int | None:
    """How many replicas a ``ROLE`` reply lists, if it is a master's (None otherwise)."""
    if not isinstance(role, (list, tuple)) or len(role) < 3 or text(role[0]) != "master":
        return None
    return len(role[2]) if isinstance(role[2], (list, tuple)) else None
