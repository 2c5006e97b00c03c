package dev.relock;

/** A won campaign: the hold whose holder leads. Its term is the hold's token. */
public final class Leadership implements AutoCloseable {
    private final Hold hold;
    private final String value;

    Leadership(Hold hold, String value) {
        this.hold = hold;
        this.value = value;
    }

    /** The hold (lost(), check(), fenced(...)). */
    public Hold hold() {
        return hold;
    }

    /** The term: the fencing token of the leadership. */
    public long term() {
        return hold.token();
    }

    /** The proclaimed value. */
    public String value() {
        return value;
    }

    /** Steps down: the next candidate leads in the same step. */
    public void resign() {
        hold.release();
    }

    @Override
    public void close() {
        hold.close();
    }
}
