package dev.relock;

import java.util.List;

/** The hold ended other than by its release; {@link #reason()} says why (LOCK.HISTORY). */
public final class LockLostException extends RelockException {
    private static final long serialVersionUID = 1L;
    private final LossReason reason;

    public LockLostException(String key, String message, LossReason reason, List<String> servers) {
        super(Kind.LOCK_LOST, key, message, servers, -1, false, null);
        this.reason = reason;
    }

    /** Why, from the server's journal where it knew; never null. */
    public LossReason reason() {
        return reason;
    }
}
