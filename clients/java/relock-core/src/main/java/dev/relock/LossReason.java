package dev.relock;

/**
 * Why a hold was lost, from the server's journal (LOCK.HISTORY): cause is its word (expired,
 * forcereleased, deleted, flushed, ...), empty when the journal had nothing on it (a failover,
 * a restart, a journal that is off, or the validity ran out on the client first).
 */
public record LossReason(String cause, Who who, String message, LogEntry entry) {}
