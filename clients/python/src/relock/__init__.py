"""relock: distributed locks for redis-py, on Redis with the relock module.

    import redis, relock

    locks = relock.Relock(redis.Redis())
    with locks.lock("orders:42", ttl=30, wait=5) as hold:
        store.write(data, fence=hold.token)     # the fencing token
        hold.check()                            # raises relock.LockLost if it was lost

``relock.Relock`` takes one ``redis.Redis``, a ``redis.cluster.RedisCluster``, or a list of
``redis.Redis`` for Redlock; ``relock.aio.Relock`` does the same for ``redis.asyncio``.
"""

from ._core import (
    DEFAULT_MAX_PARTIAL_HOLD,
    DEFAULT_NODE_TIMEOUT,
    DEFAULT_REPLICA_ACK_TIMEOUT,
    DEFAULT_RETRY_DELAY,
    DEFAULT_TTL,
    Holder,
    KeyStats,
    Leader,
    LeaderChange,
    LockInfo,
    LogEntry,
    LossReason,
    Waiter,
    Who,
)
from ._sync import GroupHold, Hold, Leadership, Observer, Relock
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

__version__ = "0.2.0"

__all__ = [
    "DEFAULT_MAX_PARTIAL_HOLD",
    "DEFAULT_NODE_TIMEOUT",
    "DEFAULT_REPLICA_ACK_TIMEOUT",
    "DEFAULT_RETRY_DELAY",
    "DEFAULT_TTL",
    "GroupHold",
    "Hold",
    "Holder",
    "InvalidArgument",
    "KeyStats",
    "Leader",
    "LeaderChange",
    "Leadership",
    "LockInfo",
    "LockLost",
    "LogEntry",
    "LossReason",
    "NotAcknowledged",
    "NotAcquired",
    "Observer",
    "OtherLimit",
    "OtherMode",
    "OtherPermits",
    "Relock",
    "RelockError",
    "ServerError",
    "StaleToken",
    "Waiter",
    "Who",
]
