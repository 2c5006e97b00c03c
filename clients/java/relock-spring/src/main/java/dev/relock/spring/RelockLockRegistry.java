package dev.relock.spring;

import dev.relock.Relock;
import java.time.Duration;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.Lock;
import org.springframework.integration.support.locks.LockRegistry;

/**
 * A Spring Integration {@link LockRegistry} backed by relock: {@link #obtain} gives the
 * {@code java.util.concurrent.locks.Lock} of {@link Relock#lock} for {@code prefix + key}
 * (thread-owned and reentrant through LOCK.REENTER, as Spring's {@code RedisLockRegistry} lock
 * is; FIFO waiting on the server instead of polling or pub/sub; renewed every ttl/3 while held,
 * so the ttl is the time a crashed holder keeps the lock, not the longest critical section).
 * The same key gives the same Lock object. The Relock is the caller's to close.
 */
public final class RelockLockRegistry implements LockRegistry<Lock> {
    private final Relock relock;
    private final String prefix;
    private final Duration ttl;
    private final ConcurrentHashMap<String, Lock> locks = new ConcurrentHashMap<>();

    /** Keys as {@code prefix + key}; each lock's lease ttl (renewed while held). */
    public RelockLockRegistry(Relock relock, String prefix, Duration ttl) {
        if (relock == null || prefix == null || ttl == null || ttl.toMillis() < 1) {
            throw new IllegalArgumentException("a Relock, a prefix (may be empty) and a ttl of 1 ms or more are needed");
        }
        this.relock = relock;
        this.prefix = prefix;
        this.ttl = ttl;
    }

    /** Prefix "", ttl 30 s. */
    public RelockLockRegistry(Relock relock) {
        this(relock, "", Duration.ofSeconds(30));
    }

    @Override
    public Lock obtain(Object lockKey) {
        if (!(lockKey instanceof String key)) {
            throw new IllegalArgumentException("the lock key must be a String, not " + (lockKey == null ? "null" : lockKey.getClass().getName()));
        }
        return locks.computeIfAbsent(prefix + key, k -> relock.lock(k, ttl));
    }

    /** The Relock the locks come from. */
    public Relock relock() {
        return relock;
    }
}
