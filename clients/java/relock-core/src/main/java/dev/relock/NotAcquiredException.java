package dev.relock;

import java.util.List;

/** The lock was not granted in time (held by another owner, no quorum, the wait ran out). */
public final class NotAcquiredException extends RelockException {
    private static final long serialVersionUID = 1L;

    public NotAcquiredException(String key, String message, List<String> servers, Throwable cause) {
        super(Kind.NOT_ACQUIRED, key, message, servers, -1, true, cause);
    }
}
