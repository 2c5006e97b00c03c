package dev.relock;

import java.util.List;

/**
 * Every failure relock reports: {@link #kind()} says which, {@link #servers()} which servers
 * failed, {@link #retryable()} whether trying again may help.
 */
public class RelockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** The kinds of failure, as in the other relock clients. */
    public enum Kind {
        /** Not granted in time (held by another owner, no quorum, the wait ran out). Retryable. */
        NOT_ACQUIRED,
        /** The hold ended other than by its release; {@link LockLostException#reason()} says why. */
        LOCK_LOST,
        /** A release or renewal no quorum answered; relock gives the lock back in the background. */
        NO_QUORUM,
        /** The key has another LIMIT there ({@link #limit()}; 0 means none). */
        OTHER_LIMIT,
        /** The owner holds the key in the other mode. */
        OTHER_MODE,
        /** The owner holds the key with another number of permits. */
        OTHER_PERMITS,
        /** A server failed in a way retrying cannot fix (NOPERM, WRONGTYPE, no module, ...). */
        SERVER,
        /** LOCK.FENCED refused the write: the token is no longer a live hold's. Nothing ran. */
        FENCED,
        /** A fenced write (or a force-release) whose reply was lost: it may have run, and was not sent again. */
        MAY_HAVE_RUN,
        /** An argument relock refuses before sending anything. */
        INVALID
    }

    private final Kind kind;
    private final String key;
    private final List<String> servers;
    private final int limit;
    private final boolean retryable;

    public RelockException(Kind kind, String key, String message, List<String> servers, int limit, boolean retryable, Throwable cause) {
        super("relock: " + message, cause);
        this.kind = kind;
        this.key = key;
        this.servers = servers == null ? List.of() : List.copyOf(servers);
        this.limit = limit;
        this.retryable = retryable;
    }

    public RelockException(Kind kind, String key, String message) {
        this(kind, key, message, null, -1, false, null);
    }

    static RelockException invalid(String message) {
        return new RelockException(Kind.INVALID, null, message);
    }

    public Kind kind() {
        return kind;
    }

    /** The key concerned, or null. */
    public String key() {
        return key;
    }

    /** The servers that failed, where known. */
    public List<String> servers() {
        return servers;
    }

    /** For {@link Kind#OTHER_LIMIT}: the key's limit there (0: none); else -1. */
    public int limit() {
        return limit;
    }

    public boolean retryable() {
        return retryable;
    }
}
