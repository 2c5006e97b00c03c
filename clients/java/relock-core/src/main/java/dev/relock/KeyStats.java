package dev.relock;

/** One of the hottest keys by total wait time on one server (LOCK.STATS), times in ms. */
public record KeyStats(String server, String key, long waits, long granted, long timeouts, long contended,
                       long waitMsTotal, long error, long waitMsMax) {}
