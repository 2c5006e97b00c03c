package dev.relock;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Decoding of the read commands' replies under RESP2 (flat arrays) and RESP3 (maps). */
final class Replies {
    private Replies() {}

    static Map<String, Object> asMap(Object reply) {
        Map<String, Object> out = new LinkedHashMap<>();
        if (reply instanceof Map<?, ?> m) {
            for (Map.Entry<?, ?> e : m.entrySet()) {
                out.put(text(e.getKey()), e.getValue());
            }
        } else if (reply instanceof List<?> l) {
            for (int i = 0; i + 1 < l.size(); i += 2) {
                out.put(text(l.get(i)), l.get(i + 1));
            }
        }
        return out;
    }

    static String text(Object v) {
        if (v == null) {
            return "";
        }
        if (v instanceof byte[] b) {
            return new String(b, StandardCharsets.UTF_8);
        }
        return v.toString();
    }

    static String optText(Object v) {
        return v == null ? null : text(v);
    }

    static long toLong(Object v, long dflt) {
        if (v instanceof Long n) {
            return n;
        }
        if (v instanceof Number n) {
            if (v instanceof Double d && d.isNaN()) {
                return dflt;
            }
            return n.longValue();
        }
        if (v instanceof String || v instanceof byte[]) {
            try {
                return Long.parseLong(text(v).trim());
            } catch (NumberFormatException e) {
                return dflt;
            }
        }
        return dflt;
    }

    static Long optLong(Object v) {
        return v == null ? null : toLong(v, 0);
    }

    static List<?> list(Object v) {
        return v instanceof List<?> l ? l : List.of();
    }

    static Info info(String server, Object reply) {
        if (reply == null) {
            return null;
        }
        Map<String, Object> m = asMap(reply);
        Object mode = m.get("mode");
        return new Info(server, optText(m.get("owner")), optLong(m.get("token")), optLong(m.get("count")),
            toLong(m.get("ttl"), 0), toLong(m.get("waiters"), 0), mode == null ? "exclusive" : text(mode),
            toLong(m.get("holders"), 1), toLong(m.get("limit"), 1), toLong(m.get("permits_free"), 0));
    }

    static List<Holder> holders(String server, Object reply) {
        List<Holder> out = new ArrayList<>();
        for (Object e : list(reply)) {
            Map<String, Object> m = asMap(e);
            out.add(new Holder(server, text(m.get("owner")), toLong(m.get("token"), 0), toLong(m.get("count"), 1),
                toLong(m.get("ttl"), 0), toLong(m.get("permits"), 1)));
        }
        return out;
    }

    static List<Waiter> waiters(String server, Object reply) {
        List<Waiter> out = new ArrayList<>();
        for (Object e : list(reply)) {
            Map<String, Object> m = asMap(e);
            long t = toLong(m.get("timeout"), -1);
            Object mode = m.get("mode");
            out.add(new Waiter(server, text(m.get("owner")), mode == null ? "exclusive" : text(mode),
                toLong(m.get("limit"), 1), toLong(m.get("permits"), 1), toLong(m.get("client"), 0),
                toLong(m.get("waited"), 0), t >= 0 ? Long.valueOf(t) : null, toLong(m.get("ttl"), 0)));
        }
        return out;
    }

    static Who who(Object v) {
        String raw = text(v);
        if (raw.isBlank()) {
            return null;
        }
        Map<String, String> f = new HashMap<>();
        for (String part : raw.split(" ")) {
            int eq = part.indexOf('=');
            if (eq > 0) {
                f.put(part.substring(0, eq), part.substring(eq + 1));
            }
        }
        Long id = null;
        try {
            id = Long.parseLong(f.getOrDefault("id", ""));
        } catch (NumberFormatException e) {
            // no id: left null
        }
        return new Who(id, nonEmpty(f.get("name")), nonEmpty(f.get("user")), nonEmpty(f.get("addr")), nonEmpty(f.get("cmd")));
    }

    private static String nonEmpty(String s) {
        return s == null || s.isEmpty() ? null : s;
    }

    static List<LogEntry> log(String server, Object reply) {
        List<LogEntry> out = new ArrayList<>();
        for (Object e : list(reply)) {
            Map<String, Object> m = asMap(e);
            Object h = m.get("held");
            Long held = h == null || text(h).isEmpty() ? null : toLong(h, 0);
            out.add(new LogEntry(server, toLong(m.get("id"), 0), toLong(m.get("time"), 0), toLong(m.get("db"), 0),
                text(m.get("key")), text(m.get("owner")), toLong(m.get("token"), 0), text(m.get("reason")), held,
                who(m.get("client-info")), toLong(m.get("waiters"), 0)));
        }
        return out;
    }

    static List<KeyStats> stats(String server, Object reply) {
        List<KeyStats> out = new ArrayList<>();
        for (Object e : list(reply)) {
            Map<String, Object> m = asMap(e);
            out.add(new KeyStats(server, text(m.get("key")), toLong(m.get("waits"), 0), toLong(m.get("granted"), 0),
                toLong(m.get("timeouts"), 0), toLong(m.get("contended"), 0), toLong(m.get("wait_ms_total"), 0),
                toLong(m.get("error"), 0), toLong(m.get("wait_ms_max"), 0)));
        }
        return out;
    }

    static final String UNKNOWN_LOSS = "the server's journal (LOCK.HISTORY) has nothing on it, so it cannot say why "
        + "(a failover or restart empties it; relock.log-max-len 0 turns it off)";

    private static final Map<String, String> LOSS_WORDS = Map.of(
        "expired", "expired on the server",
        "forcereleased", "force-released (LOCK.FORCERELEASE)",
        "deleted", "deleted (DEL, UNLINK, GETDEL, or the key overwritten by another value)",
        "evicted", "evicted by the server (maxmemory)",
        "revoked", "revoked (its waiter hung up before the grant reached it)",
        "restored", "replaced by RESTORE or COPY ... REPLACE",
        "moved", "moved away (RENAME, MOVE or MIGRATE)",
        "flushed", "flushed with its database (FLUSHDB or FLUSHALL)",
        "swapped", "swapped out with its database (SWAPDB)");

    static String describeLoss(LogEntry e) {
        String what = LOSS_WORDS.getOrDefault(e.reason(), e.reason());
        if (e.reason().equals("expired") && e.heldMs() != null) {
            what += String.format(": not renewed in time, after %.3f s held", e.heldMs() / 1000.0);
        }
        if (e.who() != null) {
            what += " by " + e.who();
        }
        return what;
    }

    /** owner's newest entry, or a flush or swap (no key) at or after since (Unix ms). */
    static LossReason lossReason(List<LogEntry> entries, String owner, long since) {
        for (LogEntry e : entries) {
            if (e.owner().equals(owner) || (e.key().isEmpty() && e.owner().isEmpty() && e.timeMs() >= since - 1000)) {
                return new LossReason(e.reason(), e.who(), describeLoss(e), e);
            }
        }
        return new LossReason("", null, UNKNOWN_LOSS, null);
    }
}
