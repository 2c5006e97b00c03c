package dev.relock;

import java.time.Duration;

/**
 * How to take a lock: its lease (ttl, default 30 s, renewed every ttl/3 while held), how long
 * to wait (default: try once), and its mode (exclusive; shared; a semaphore's permits).
 * Immutable: each method returns a new value.
 */
public final class LockOptions {
    /** The lease when none is given (relock-client's and lockctl's). */
    public static final Duration DEFAULT_TTL = Duration.ofSeconds(30);

    final Duration ttl;
    /** null: wait without a limit; ZERO: try once. */
    final Duration wait;
    final boolean shared;
    final int limit;
    final int permits;

    private LockOptions(Duration ttl, Duration wait, boolean shared, int limit, int permits) {
        this.ttl = ttl;
        this.wait = wait;
        this.shared = shared;
        this.limit = limit;
        this.permits = permits;
    }

    /** Try once, exclusive, ttl 30 s. */
    public static LockOptions defaults() {
        return new LockOptions(DEFAULT_TTL, Duration.ZERO, false, 0, 0);
    }

    /** The defaults with this lease. */
    public static LockOptions ttl(Duration ttl) {
        return defaults().withTtl(ttl);
    }

    public LockOptions withTtl(Duration ttl) {
        return new LockOptions(ttl, wait, shared, limit, permits);
    }

    /** Wait up to d in the key's first-in, first-out queue (ZERO: try once). */
    public LockOptions waitAtMost(Duration d) {
        if (d == null || d.isNegative()) {
            throw RelockException.invalid("waitAtMost takes a duration of 0 or more; waitForever() waits without a limit");
        }
        return new LockOptions(ttl, d, shared, limit, permits);
    }

    /** Wait without a limit of its own (an interrupt ends the wait). */
    public LockOptions waitForever() {
        return new LockOptions(ttl, null, shared, limit, permits);
    }

    /** A shared hold: a read lock (or a semaphore's permit with {@link #limit}). */
    public LockOptions shared() {
        return new LockOptions(ttl, wait, true, limit, permits);
    }

    /** The key is a counting semaphore of n permits (implies shared; one server or a cluster). */
    public LockOptions limit(int n) {
        return new LockOptions(ttl, wait, true, n, permits);
    }

    /** Take p permits of a semaphore at once (with {@link #limit}). */
    public LockOptions permits(int p) {
        return new LockOptions(ttl, wait, shared, limit, p);
    }

    public Duration ttl() {
        return ttl;
    }

    /** null: without a limit. */
    public Duration waitTime() {
        return wait;
    }
}
