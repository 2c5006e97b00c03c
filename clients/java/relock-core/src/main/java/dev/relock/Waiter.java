package dev.relock;

/** One client queued for a key on one server (LOCK.WAITERS), in queue order; timeoutMs null: none. */
public record Waiter(String server, String owner, String mode, long limit, long permits, long client, long waitedMs,
                     Long timeoutMs, long ttlMs) {}
