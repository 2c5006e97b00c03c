package dev.relock;

/** An error reply of a server (the text after '-', e.g. {@code ERR lock has another limit (5)}). */
public final class ReplyError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public ReplyError(String text) {
        super(text, null, false, false);
    }

    /** The reply's text, without the leading '-'. */
    public String text() {
        return getMessage();
    }

    /** The first word: ERR, MOVED, ASK, NOPERM, ... */
    public String code() {
        String t = text();
        int sp = t.indexOf(' ');
        return sp < 0 ? t : t.substring(0, sp);
    }
}
