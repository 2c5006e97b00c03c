package dev.relock;

/**
 * One entry of the server's journal of holds that ended other than by their owner
 * (LOCK.HISTORY, LOCK.LOG). timeMs: Unix ms (the server's clock); heldMs null for holds granted
 * before the server started; a flush or swap has an empty key and owner.
 */
public record LogEntry(String server, long id, long timeMs, long db, String key, String owner, long token, String reason,
                       Long heldMs, Who who, long waiters) {}
