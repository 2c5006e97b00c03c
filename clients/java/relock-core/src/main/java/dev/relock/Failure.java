package dev.relock;

import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Why one server did not do what was asked; {@link #classify} is the one place that decides. */
final class Failure {
    String msg;
    boolean refused;
    boolean permanent;
    boolean timeout;
    boolean grace;
    boolean badTtl;
    boolean otherMode;
    boolean otherPermits;
    int otherLimit = -1;
    /** A grant whose undo (release FROM 1) was answered: that master no longer has it. */
    boolean undone;

    static Failure refusal() {
        Failure f = new Failure();
        f.msg = "not granted (held by another owner or not held by us)";
        f.refused = true;
        return f;
    }

    static Failure transientOf(String msg, boolean timeout) {
        Failure f = new Failure();
        f.msg = msg;
        f.timeout = timeout;
        return f;
    }

    /** A reply relock cannot read: permanent. */
    static final class BadReply extends RuntimeException {
        private static final long serialVersionUID = 1L;

        BadReply(String msg) {
            super("a reply relock cannot read: " + msg);
        }
    }

    /** The client was closed. */
    static final class Closed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Closed() {
            super("the relock client was closed");
        }
    }

    private static final Set<String> TRANSIENT = Set.of("BUSY", "MISCONF", "NOREPLICAS", "UNBLOCKED", "NOTREADY",
        "CLUSTERDOWN", "MASTERDOWN", "LOADING", "READONLY", "OOM", "TRYAGAIN", "MOVED", "ASK");
    private static final Pattern OTHER_LIMIT = Pattern.compile("^lock has another limit \\((\\d+)\\)$");

    /**
     * Permanent: refused logins, permissions, WRONGTYPE, unknown commands, refused arguments,
     * MOVED/ASK from a plain server; transient: timeouts, lost connections, a busy, loading or
     * failing-over server.
     */
    static Failure classify(Throwable err, boolean cluster) {
        Failure f = new Failure();
        if (err instanceof BadReply || err instanceof Closed) {
            f.msg = err.getMessage();
            f.permanent = true;
            return f;
        }
        if (!(err instanceof ReplyError re)) {
            f.msg = err.getMessage() == null ? err.toString() : err.getMessage();
            f.timeout = err instanceof TransportException te && te.timeout();
            return f;
        }
        String msg = re.text();
        if (msg.startsWith("ERR ")) {
            msg = msg.substring(4);
        }
        if (msg.startsWith("TRYAGAIN") && msg.contains("restart grace")) {
            f.msg = "in its restart grace, granting nothing new yet (" + msg.replaceFirst("^TRYAGAIN ", "") + ")";
            f.grace = true;
            return f;
        }
        if (msg.startsWith("lock is held with other permits")) {
            f.msg = "the owner holds the lock there with another number of permits";
            f.permanent = f.otherPermits = true;
            return f;
        }
        if (msg.startsWith("lock is held in another mode")) {
            f.msg = "the owner holds the lock in the other mode there";
            f.permanent = f.otherMode = true;
            return f;
        }
        if (msg.startsWith("ttl_ms exceeds")) {
            f.msg = msg;
            f.permanent = f.badTtl = true;
            return f;
        }
        Matcher m = OTHER_LIMIT.matcher(msg);
        if (m.matches()) {
            int n = Integer.parseInt(m.group(1));
            f.msg = "the lock has another limit there (" + n + "; 0 means none)";
            f.permanent = true;
            f.otherLimit = n;
            return f;
        }
        int sp = msg.indexOf(' ');
        String code = sp < 0 ? msg : msg.substring(0, sp);
        f.msg = msg;
        if (!cluster && (code.equals("MOVED") || code.equals("ASK"))) {
            f.msg += " (a Redis Cluster node: give relock a cluster transport, not one node's)";
            f.permanent = true;
            return f;
        }
        if (TRANSIENT.contains(code) || msg.startsWith("max number of clients reached")) {
            return f;
        }
        if (code.equals("NOPERM")) {
            f.msg += " (the user's ACL does not allow it)";
        }
        if (msg.startsWith("unknown command") && msg.toUpperCase().contains("LOCK.")) {
            f.msg += " (is the relock module loaded on this server?)";
        }
        if (code.equals("NOAUTH") || code.equals("WRONGPASS")) {
            f.msg += " (check the user and password)";
        }
        f.permanent = true;
        return f;
    }
}
