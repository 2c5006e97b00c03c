package dev.relock;

import java.time.Duration;
import java.util.Optional;

/**
 * A counting semaphore of a fixed number of permits at one key, kept by the server: each
 * acquisition is a {@link Hold} (a lease, renewed while held, its permits back when released
 * or lost), as Redisson's RPermitExpirableSemaphore.
 */
public final class RelockSemaphore {
    private final Relock c;
    private final String key;
    private final int limit;

    RelockSemaphore(Relock c, String key, int limit) {
        this.c = c;
        this.key = key;
        this.limit = limit;
    }

    /** Takes permits (1 .. limit) with this lease, waiting up to wait (ZERO: try once; null: no limit). */
    public Hold acquire(int permits, Duration ttl, Duration wait) {
        LockOptions o = LockOptions.ttl(ttl).limit(limit).permits(permits);
        return c.acquire(key, wait == null ? o.waitForever() : o.waitAtMost(wait));
    }

    /** One permit, try once. */
    public Optional<Hold> tryAcquire(Duration ttl) {
        try {
            return Optional.of(acquire(1, ttl, Duration.ZERO));
        } catch (NotAcquiredException e) {
            return Optional.empty();
        }
    }

    /** The permits free now (LOCK.INFO's permits_free; the limit when nobody holds one). */
    public long availablePermits() {
        return c.info(key).map(Info::permitsFree).orElse((long) limit);
    }

    public int limit() {
        return limit;
    }
}
