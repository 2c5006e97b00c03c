package dev.relock;

import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

/** What needs no I/O: limits, owners, validity (as relock-client and the Go client). */
final class Rules {
    private Rules() {}

    static final long MIN_TTL_MS = 5;
    static final long MAX_MS = 1_000_000_000_000L;
    static final int MAX_LIMIT = 1_000_000;
    static final int MAX_KEYS = 256;
    static final int MAX_OWNER = 256;
    /** Added to a LOCK.WAIT's own timeout: the server answers nil at its timeout. */
    static final long WAIT_GRACE_MS = 1000;

    /** The clock drift allowed for ttlMs: 1 % plus 2 ms, in µs. */
    static long driftUs(long ttlMs) {
        return ttlMs * 1000 / 100 + 2000;
    }

    /** ttl - elapsed - drift in whole µs; -1 when nothing is left (integer arithmetic). */
    static long validityUs(long ttlMs, long elapsedUs) {
        long left = ttlMs * 1000 - Math.max(0, elapsedUs) - driftUs(ttlMs);
        return left > 0 ? left : -1;
    }

    /** How long before its validity ends a hold is reported lost: ttl/20, at most 20 ms. */
    static long lossLeadNanos(long ttlMs) {
        return Math.min(ttlMs * 1_000_000 / 20, 20_000_000L);
    }

    static long jitterMs(long ms) {
        return ms / 2 + ThreadLocalRandom.current().nextLong(ms + 1);
    }

    static long checkTtl(java.time.Duration ttl) {
        long ms = ttl.toMillis();
        if (ms > 0 && ms < MIN_TTL_MS) {
            throw RelockException.invalid("invalid ttl " + ttl + ": the smallest usable ttl is 5 ms, since the drift allowance of 1 % + 2 ms leaves less than half of a shorter one valid");
        }
        if (ms < MIN_TTL_MS || ms > MAX_MS) {
            throw RelockException.invalid("invalid ttl " + ttl + " (must be 5 ms to 10^12 ms)");
        }
        return ms;
    }

    static List<Object> modeArgs(boolean shared, int limit, int permits) {
        List<Object> out = new ArrayList<>();
        if (limit > 0) {
            out.add("SHARED");
            out.add("LIMIT");
            out.add(limit);
            if (permits > 0) {
                out.add("PERMITS");
                out.add(permits);
            }
        } else if (shared) {
            out.add("SHARED");
        }
        return out;
    }

    static void checkMode(int limit, int permits, int masters) {
        if (permits != 0) {
            if (limit == 0) {
                throw RelockException.invalid("permits " + permits + " needs a limit: several permits are taken of a semaphore");
            }
            if (permits < 1 || permits > limit) {
                throw RelockException.invalid("invalid permits " + permits + " (must be 1 to the limit, " + limit + ")");
            }
        }
        if (limit == 0) {
            return;
        }
        if (limit < 1 || limit > MAX_LIMIT) {
            throw RelockException.invalid("invalid limit " + limit + " (must be 1 to " + MAX_LIMIT + ")");
        }
        if (masters > 1) {
            throw RelockException.invalid("a limit (" + limit + ") needs one server or a Redis Cluster, not " + masters
                + " independent masters: a quorum cannot count permits; a shared lock without a limit is sound over a quorum");
        }
    }

    private static final SecureRandom RANDOM = new SecureRandom();
    private static final String HOST_PID = hostPid();

    private static String hostPid() {
        String host;
        try {
            host = java.net.InetAddress.getLocalHost().getHostName();
        } catch (Exception e) {
            host = "localhost";
        }
        return host + "/" + ProcessHandle.current().pid();
    }

    /** A fresh owner {@code <prefix>/<32 hex>}; prefix null: {@code <host>/<pid>}. */
    static String makeOwner(String prefix) {
        return withRandom(prefix == null ? HOST_PID : prefix);
    }

    /** {@code <text>/<32 random hex>} (text cut to fit 256 bytes; "": the random part alone). */
    static String withRandom(String text) {
        byte[] b = new byte[16];
        RANDOM.nextBytes(b);
        String r = HexFormat.of().formatHex(b);
        if (text.isEmpty()) {
            return r;
        }
        return cutUtf8(text, MAX_OWNER - r.length() - 1) + "/" + r;
    }

    static String cutUtf8(String s, int room) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length <= room) {
            return s;
        }
        int end = room;
        // Step back over continuation bytes so that no character is cut in two.
        while (end > 0 && (b[end] & 0xC0) == 0x80) {
            end--;
        }
        return new String(b, 0, end, StandardCharsets.UTF_8);
    }
}
