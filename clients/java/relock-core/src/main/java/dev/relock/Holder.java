package dev.relock;

/** One holder of a key on one server (LOCK.HOLDERS). */
public record Holder(String server, String owner, long token, long count, long ttlMs, long permits) {}
