"""The errors of relock. Every one says whether retrying the same call can help
(``retryable``) and names the servers that failed (``servers``, as ``host:port``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ._core import LossReason, Who


class RelockError(Exception):
    """Base of every error relock raises.

    ``key`` is the lock's key (``None`` when the error is not about one), ``servers`` the
    servers to blame (``host:port``; empty when none is), and ``retryable`` whether the same
    call can succeed if tried again: False for a usage error or an answer that stays true
    until someone changes the server or the key (the module is not loaded, the login was
    refused, the key holds another type, another limit).
    """

    retryable: bool = True

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        servers: Sequence[str] = (),
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.servers: list[str] = list(servers)
        if retryable is not None:
            self.retryable = retryable


class NotAcquired(RelockError):
    """The lock was not acquired: another owner held it for the whole wait (or, with
    ``wait=0``, at the one try), or too few Redlock masters granted it. Retrying can help."""

    retryable = True


class NotAcknowledged(NotAcquired):
    """The master granted the lock, but fewer of its replicas than ``replica_acks`` asked
    acknowledged the grant within ``replica_ack_timeout`` (``WAIT``): the grant was released
    again on that master (``master``, ``host:port``), and the acquisition failed at once.
    ``acked`` replicas acknowledged, ``wanted`` were asked for. Retrying can help (a replica
    that lagged catches up)."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        servers: Sequence[str] = (),
        master: str = "",
        acked: int = 0,
        wanted: int = 0,
    ) -> None:
        super().__init__(message, key=key, servers=servers)
        self.master = master
        self.acked = acked
        self.wanted = wanted


class LockLost(RelockError):
    """A hold ended while its holder still counted on it.

    ``reason`` says what the client saw (a renewal refused, the validity run out, the
    process forked) and, when the server was asked, why; ``loss`` is the server's account
    from ``LOCK.HISTORY`` (a ``relock.LossReason``: ``cause``, ``who``, ``message``), None
    when the client did not ask (a stall, a fork). ``cause`` and ``who`` are ``loss``'s.
    Retrying the work needs a new acquisition: ``retryable`` is False for the hold.
    """

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        servers: Sequence[str] = (),
        reason: str = "",
        loss: LossReason | None = None,
    ) -> None:
        super().__init__(message, key=key, servers=servers, retryable=False)
        self.reason = reason
        self.loss = loss

    @property
    def cause(self) -> str | None:
        """The server's word for the loss (``expired``, ``forcereleased``, ``deleted``,
        ``flushed``, ...), None when it could not say."""
        return None if self.loss is None else self.loss.cause

    @property
    def who(self) -> Who | None:
        """The client that ended the hold, where the server could tell."""
        return None if self.loss is None else self.loss.who


class ServerError(RelockError):
    """A server answered with an error, or did not answer. ``retryable`` says whether it may
    pass (a timeout, a lost connection, ``LOADING``, ``BUSY``, ``OOM``, ``READONLY``,
    ``TRYAGAIN``) or not (the module is not loaded, ``WRONGTYPE``, ``NOPERM``, a refused
    login, an argument the server refuses)."""


class OtherLimit(ServerError):
    """A shared request named another limit than the one the key has on ``servers[0]``
    (``ERR lock has another limit (n)``); ``limit`` is the key's (0: a read lock). Every
    user of one semaphore must ask with one limit. Not retryable."""

    retryable = False

    def __init__(self, message: str, *, key: str, servers: Sequence[str], limit: int) -> None:
        super().__init__(message, key=key, servers=servers, retryable=False)
        self.limit = limit


class OtherMode(ServerError):
    """The owner already holds the key in the other mode (``ERR lock is held in another
    mode``): a shared hold is never upgraded; an exclusive one becomes shared only with
    ``hold.downgrade()``. Not retryable."""

    retryable = False


class OtherPermits(ServerError):
    """The owner already holds the key with another number of permits (``ERR lock is held
    with other permits``): a hold keeps the permits it was granted. Not retryable."""

    retryable = False


class InvalidArgument(RelockError, ValueError):
    """A usage error found before any server was asked: a ttl outside 1 ms to 10^12 ms, a
    limit outside 1 to 10^6, a limit over several independent masters. Not retryable."""

    retryable = False


class StaleToken(ServerError):
    """``LOCK.FENCED`` refused the command: the token is not a live hold's any more (``-FENCED
    stale token <token>, current <token | shared | none>``), and nothing ran. ``current`` is
    what the server named (``None`` when it could not be read). Never retried with another
    token: the holder lost its hold (a leader its term) and must not write."""

    retryable = False

    def __init__(self, message: str, *, key: str, servers: Sequence[str], token: int, current: str | None) -> None:
        super().__init__(message, key=key, servers=servers, retryable=False)
        self.token = token
        self.current = current
