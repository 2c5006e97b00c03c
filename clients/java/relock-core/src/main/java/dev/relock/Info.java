package dev.relock;

/**
 * LOCK.INFO on one server. For a shared key owner, token and count are null. ttlMs -1: no
 * expiry. limit is 1 for exclusive, n for a semaphore, 0 for a read lock.
 */
public record Info(String server, String owner, Long token, Long count, long ttlMs, long waiters, String mode,
                   long holders, long limit, long permitsFree) {}
