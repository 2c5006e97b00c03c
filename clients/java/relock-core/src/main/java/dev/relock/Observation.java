package dev.relock;

/**
 * One report of {@link Relock#observe}: the leader (null: none), whether its term is lower than
 * one seen before (the store lost history), or an error that ended the observation.
 */
public record Observation(LeaderInfo leader, boolean regressed, RelockException error) {}
