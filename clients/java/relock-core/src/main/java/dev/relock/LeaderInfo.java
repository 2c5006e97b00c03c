package dev.relock;

/** The leader of an election: its proclaimed value, owner, term (the hold's token) and ttl left. */
public record LeaderInfo(String value, String owner, long term, long ttlMs) {}
