package dev.relock;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The client cases every relock client runs (spec/client-cases/, see its README.md): the
 * round's verdicts, the validity arithmetic, the classification of failures and the decoding of
 * the read commands' replies under RESP2 and RESP3, run against this package's rules. A case
 * whose {@code diverges} names {@code java} must still fail here (so that fixing it means
 * removing the mark).
 */
class ClientCasesTest {
    static final ObjectMapper JSON = new ObjectMapper();

    static Path casesDir() {
        String dir = System.getProperty("relock.cases");
        if (dir != null) {
            return Path.of(dir);
        }
        Path p = Path.of("").toAbsolutePath();
        while (p != null && !Files.isDirectory(p.resolve("spec/client-cases"))) {
            p = p.getParent();
        }
        if (p == null) {
            throw new IllegalStateException("spec/client-cases not found (set -Drelock.cases)");
        }
        return p.resolve("spec/client-cases");
    }

    static List<JsonNode> load(String file) throws IOException {
        JsonNode doc = JSON.readTree(casesDir().resolve(file).toFile());
        List<JsonNode> out = new ArrayList<>();
        doc.get("cases").forEach(out::add);
        if (out.isEmpty()) {
            throw new IllegalStateException(file + ": no cases");
        }
        return out;
    }

    /** check returns null when the case passes, else what differs. */
    static Stream<DynamicTest> run(String file, Function<JsonNode, String> check) throws IOException {
        return load(file).stream().map(c -> DynamicTest.dynamicTest(c.get("name").asText(), () -> {
            String err = check.apply(c);
            JsonNode div = c.path("diverges").get("java");
            if (div != null) {
                if (err == null) {
                    fail("passes now; remove its diverges.java mark (" + div.asText() + ")");
                }
                return;
            }
            if (err != null) {
                fail(err);
            }
        }));
    }

    // --- errors.json -------------------------------------------------------------------

    static Failure failureOf(String reply) {
        return switch (reply) {
            case "timeout" -> Failure.classify(new TransportException("read timed out", true, true, null), false);
            case "down" -> Failure.classify(new TransportException("connection refused", false, false, null), false);
            default -> Failure.classify(new ReplyError(reply.substring(1)), false);
        };
    }

    static JsonNode classified(Failure f) {
        ObjectNode out = JSON.createObjectNode();
        out.put("class", f.permanent ? "permanent" : "transient");
        String kind = f.otherLimit >= 0 ? "other_limit" : f.otherMode ? "other_mode" : f.otherPermits ? "other_permits"
            : f.grace ? "grace" : f.badTtl ? "bad_ttl" : null;
        if (kind == null) {
            out.putNull("kind");
        } else {
            out.put("kind", kind);
        }
        if (f.otherLimit >= 0) {
            out.put("limit", f.otherLimit);
        }
        return out;
    }

    static String checkError(JsonNode c) {
        JsonNode got = classified(failureOf(c.get("reply").asText()));
        return got.equals(c.get("expect")) ? null : "got " + got + ", want " + c.get("expect");
    }

    @TestFactory
    Stream<DynamicTest> errors() throws IOException {
        return run("errors.json", ClientCasesTest::checkError);
    }

    // --- validity.json -----------------------------------------------------------------

    static String checkValidity(JsonNode c) {
        long ttl = c.get("ttl_ms").asLong();
        if (Rules.driftUs(ttl) != c.get("drift_us").asLong()) {
            return "drift_us " + Rules.driftUs(ttl) + ", want " + c.get("drift_us");
        }
        long v = Rules.validityUs(ttl, c.get("elapsed_us").asLong());
        JsonNode want = c.get("validity_us");
        boolean ok = want.isNull() ? v < 0 : v == want.asLong();
        return ok ? null : "validity_us " + (v < 0 ? "none" : v) + ", want " + want;
    }

    @TestFactory
    Stream<DynamicTest> validity() throws IOException {
        return run("validity.json", ClientCasesTest::checkValidity);
    }

    // --- round.json --------------------------------------------------------------------

    record Fed(Round round, List<String> progress) {}

    static Fed roundOf(JsonNode c) {
        int n = c.get("masters").asInt();
        String[] names = new String[n];
        for (int i = 0; i < n; i++) {
            names[i] = "m" + i;
        }
        Round rnd = new Round(names, 0, "all".equals(c.path("until").asText()));
        List<String> prog = new ArrayList<>();
        for (JsonNode pair : c.get("replies")) {
            int i = pair.get(0).asInt();
            String text = pair.get(1).asText();
            Round.Progress p;
            if (text.equals("nil")) {
                p = rnd.onReply(i, null, null);
            } else if (text.startsWith("grant ")) {
                p = rnd.onReply(i, Long.parseLong(text.substring(6)), null);
            } else {
                p = rnd.onReply(i, null, failureOf(text));
            }
            prog.add(p.name().toLowerCase());
        }
        double elapsed = c.has("elapsed_ms") ? c.get("elapsed_ms").asDouble() : 5;
        rnd.finish((long) (elapsed * 1_000_000));
        return new Fed(rnd, prog);
    }

    static String verdict(RelockException e) {
        return switch (e.kind()) {
            case OTHER_LIMIT -> "other_limit";
            case OTHER_MODE -> "other_mode";
            case OTHER_PERMITS -> "other_permits";
            case NOT_ACQUIRED -> "not_acquired";
            default -> "permanent";
        };
    }

    static JsonNode tree(Object v) {
        try {
            return JSON.readTree(JSON.writeValueAsString(v));
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    static List<Boolean> bools(boolean[] b) {
        List<Boolean> out = new ArrayList<>();
        for (boolean x : b) {
            out.add(x);
        }
        return out;
    }

    static String checkRound(JsonNode c) {
        JsonNode want = c.get("expect");
        long ttl = c.has("ttl_ms") ? c.get("ttl_ms").asLong() : 10000;
        Fed fed = roundOf(c);
        Round rnd = fed.round();
        List<String> errs = new ArrayList<>();
        java.util.function.BiConsumer<String, Object> eq = (field, got) -> {
            JsonNode g = tree(got);
            if (!g.equals(tree(want.get(field)))) {
                errs.add(field + ": got " + g + ", want " + want.get(field));
            }
        };
        if (want.has("progress")) {
            eq.accept("progress", fed.progress());
        }
        if (want.has("tokens")) {
            List<Object> tokens = new ArrayList<>();
            for (Object v : rnd.agreed) {
                tokens.add(v);
            }
            eq.accept("tokens", tokens);
        }
        if (want.has("may_hold")) {
            eq.accept("may_hold", bools(rnd.mayHold()));
        }
        if (want.has("give_back_later")) {
            boolean[][] gb = rnd.giveBack();
            if (want.has("tokens")) {
                List<Boolean> nowWant = new ArrayList<>();
                want.get("tokens").forEach(t -> nowWant.add(!t.isNull()));
                if (!bools(gb[0]).equals(nowWant)) {
                    errs.add("give back now: got " + bools(gb[0]) + ", want " + nowWant);
                }
            }
            eq.accept("give_back_later", bools(gb[1]));
        }
        if (want.has("validity_ms")) {
            long v = rnd.validUs(ttl);
            JsonNode w = want.get("validity_ms");
            if (w.isNull() != (v < 0) || (!w.isNull() && Math.abs(v / 1000.0 - w.asDouble()) > 1e-6)) {
                errs.add("validity_ms: got " + (v < 0 ? "none" : v / 1000.0) + ", want " + w);
            }
        }
        if (want.has("acquire")) {
            eq.accept("acquire", rnd.validUs(ttl) >= 0 ? "acquired" : verdict(rnd.acquireError("k", ttl, 0)));
        }
        if (want.has("renew")) {
            String got = "renewed";
            if (rnd.validUs(ttl) < 0) {
                got = rnd.badTtl() ? "kept" : rnd.renewLost() ? "lost" : "retry";
            }
            eq.accept("renew", got);
        }
        if (want.has("release")) {
            // Hold.release's outcomes: returns, SERVER, LOCK_LOST (every master that did not
            // release said nil), NO_QUORUM (some failed otherwise).
            String got = rnd.won() ? "released" : rnd.releaseError("k") != null ? "permanent" : !rnd.someFailed() ? "lost" : "no_quorum";
            eq.accept("release", got);
        }
        for (String field : List.of("wait", "wait_at_deadline")) {
            if (!want.has(field)) {
                continue;
            }
            RelockException e = rnd.afterFailed("k", ttl, 0, field.equals("wait_at_deadline"), false);
            String got = "again";
            if (e != null) {
                got = verdict(e);
                if (got.equals("not_acquired")) {
                    got = "stop";
                }
            }
            eq.accept(field, got);
        }
        return errs.isEmpty() ? null : String.join("; ", errs);
    }

    @TestFactory
    Stream<DynamicTest> round() throws IOException {
        return run("round.json", ClientCasesTest::checkRound);
    }

    // --- replies.json ------------------------------------------------------------------

    /** A reply as the case files write it, as a Transport gives it. */
    static Object value(JsonNode t) {
        if (t == null || t.isNull()) {
            return null;
        }
        Map.Entry<String, JsonNode> e = t.fields().next();
        JsonNode v = e.getValue();
        switch (e.getKey()) {
            case "int":
                return v.asLong();
            case "double":
                return v.asDouble();
            case "bulk":
            case "simple":
                return v.asText();
            case "bool":
                return v.asBoolean();
            case "array":
            case "set": {
                List<Object> out = new ArrayList<>();
                v.forEach(x -> out.add(value(x)));
                return out;
            }
            case "map": {
                Map<Object, Object> out = new LinkedHashMap<>();
                v.forEach(kv -> out.put(value(kv.get(0)), value(kv.get(1))));
                return out;
            }
            default:
                throw new IllegalArgumentException("unknown reply tag " + e.getKey());
        }
    }

    static Object decode(String command, Object reply) {
        switch (command) {
            case "LOCK.INFO": {
                Info i = Replies.info("s", reply);
                if (i == null) {
                    return null;
                }
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("owner", i.owner());
                m.put("token", i.token());
                m.put("count", i.count());
                m.put("ttl_ms", i.ttlMs());
                m.put("waiters", i.waiters());
                m.put("mode", i.mode());
                m.put("holders", i.holders());
                m.put("limit", i.limit());
                m.put("permits_free", i.permitsFree());
                return m;
            }
            case "LOCK.HOLDERS": {
                List<Object> out = new ArrayList<>();
                for (Holder h : Replies.holders("s", reply)) {
                    out.add(Map.of("owner", h.owner(), "token", h.token(), "count", h.count(), "ttl_ms", h.ttlMs(), "permits", h.permits()));
                }
                return out;
            }
            case "LOCK.HISTORY":
            case "LOCK.LOG": {
                List<Object> out = new ArrayList<>();
                for (LogEntry e : Replies.log("s", reply)) {
                    Map<String, Object> who = null;
                    if (e.who() != null) {
                        who = new LinkedHashMap<>();
                        who.put("client", e.who().client());
                        who.put("name", e.who().name());
                        who.put("user", e.who().user());
                        who.put("addr", e.who().addr());
                        who.put("command", e.who().command());
                    }
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("id", e.id());
                    m.put("time_ms", e.timeMs());
                    m.put("db", e.db());
                    m.put("key", e.key());
                    m.put("owner", e.owner());
                    m.put("token", e.token());
                    m.put("reason", e.reason());
                    m.put("held_ms", e.heldMs());
                    m.put("who", who);
                    m.put("waiters", e.waiters());
                    out.add(m);
                }
                return out;
            }
            case "LOCK.WAITERS": {
                List<Object> out = new ArrayList<>();
                for (Waiter w : Replies.waiters("s", reply)) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("owner", w.owner());
                    m.put("mode", w.mode());
                    m.put("limit", w.limit());
                    m.put("permits", w.permits());
                    m.put("client", w.client());
                    m.put("waited_ms", w.waitedMs());
                    m.put("timeout_ms", w.timeoutMs());
                    m.put("ttl_ms", w.ttlMs());
                    out.add(m);
                }
                return out;
            }
            case "LOCK.STATS": {
                List<Object> out = new ArrayList<>();
                for (KeyStats k : Replies.stats("s", reply)) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("key", k.key());
                    m.put("waits", k.waits());
                    m.put("granted", k.granted());
                    m.put("timeouts", k.timeouts());
                    m.put("contended", k.contended());
                    m.put("wait_ms_total", k.waitMsTotal());
                    m.put("error", k.error());
                    m.put("wait_ms_max", k.waitMsMax());
                    out.add(m);
                }
                return out;
            }
            default:
                throw new IllegalArgumentException("no decoder for " + command);
        }
    }

    static String checkReplies(JsonNode c) {
        String command = c.get("command").get(0).asText();
        if (!c.has("decoded")) {
            return "no decoded";
        }
        JsonNode want = c.get("decoded");
        if (command.equals("LOCK.HOLDERS") && want.isNull()) {
            want = JSON.createArrayNode(); // holders() is a list: no lock, no holders
        }
        for (String resp : List.of("resp2", "resp3")) {
            JsonNode got = tree(decode(command, value(c.get(resp))));
            if (!got.equals(tree(want))) {
                return resp + ": got " + got + ", want " + want;
            }
        }
        return null;
    }

    @TestFactory
    Stream<DynamicTest> replies() throws IOException {
        return run("replies.json", ClientCasesTest::checkReplies);
    }

    /** Each runner fails a case made wrong on purpose (a runner that checked nothing would pass all). */
    @Test
    void wrongCasesFail() throws IOException {
        ObjectNode e = load("errors.json").get(0).deepCopy();
        assertTrue(checkError(e) == null);
        ((ObjectNode) e.get("expect")).put("class", "transient");
        assertFalse(checkError(e) == null);

        ObjectNode v = load("validity.json").get(0).deepCopy();
        assertTrue(checkValidity(v) == null);
        v.put("validity_us", v.get("validity_us").asLong() + 1);
        assertFalse(checkValidity(v) == null);

        ObjectNode r = load("round.json").get(0).deepCopy();
        assertTrue(checkRound(r) == null);
        ((ObjectNode) r.get("expect")).put("acquire", "not_acquired");
        assertFalse(checkRound(r) == null);

        ObjectNode p = load("replies.json").get(1).deepCopy();
        assertTrue(checkReplies(p) == null);
        ((ObjectNode) p.get("decoded")).put("token", 1);
        assertFalse(checkReplies(p) == null);
    }

    @Test
    void rulesRefuseBadArguments() {
        assertThrows(RelockException.class, () -> Rules.checkTtl(java.time.Duration.ofMillis(4)));
        assertThrows(RelockException.class, () -> Rules.checkMode(2, 0, 3));
        assertThrows(RelockException.class, () -> Rules.checkMode(0, 2, 1));
        assertDoesNotThrow(() -> Rules.checkMode(0, 0, 3));
        String owner = Rules.withRandom("é".repeat(300));
        assertTrue(owner.getBytes(java.nio.charset.StandardCharsets.UTF_8).length <= 256);
        assertTrue(Relock.proclaimed("web-1/abc").equals("web-1"));
    }
}
