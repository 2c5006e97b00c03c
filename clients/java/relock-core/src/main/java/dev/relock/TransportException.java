package dev.relock;

/**
 * A command that got no reply: the connection could not be opened ({@link #sent()} false:
 * nothing was sent, the command did not run), or the reply was lost (sent true: it may have run;
 * {@link #timeout()} when the bound passed).
 */
public final class TransportException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final boolean sent;
    private final boolean timeout;

    public TransportException(String message, boolean sent, boolean timeout, Throwable cause) {
        super(message, cause);
        this.sent = sent;
        this.timeout = timeout;
    }

    /** Whether any byte of the command may have left: then it may have run. */
    public boolean sent() {
        return sent;
    }

    /** Whether the bound passed (rather than a refused or reset connection). */
    public boolean timeout() {
        return timeout;
    }
}
