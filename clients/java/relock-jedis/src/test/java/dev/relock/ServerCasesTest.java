package dev.relock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import dev.relock.jedis.JedisTransport;
import dev.relock.jedis.RedisServer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.DefaultJedisClientConfig;

/**
 * The shared client cases against real servers, through the Jedis transport: every errors.json
 * case with a {@code module} field is made to happen on a server of its own kind, the text
 * Jedis hands over must be exactly the case's reply, and the client must classify it as the case
 * says.
 */
class ServerCasesTest {

    @Test
    void everyModuleErrorCaseThroughJedis() throws Exception {
        Map<String, List<JsonNode>> byServer = new LinkedHashMap<>();
        int n = 0;
        for (JsonNode c : ClientCasesTest.load("errors.json")) {
            JsonNode m = c.get("module");
            if (m == null) {
                continue;
            }
            byServer.computeIfAbsent(m.path("server").toString(), k -> new ArrayList<>()).add(c);
            n++;
        }
        assertEquals(13, n, "errors.json's cases with a module field (update when cases are added)");
        for (Map.Entry<String, List<JsonNode>> group : byServer.entrySet()) {
            JsonNode spec = group.getValue().get(0).get("module").path("server");
            boolean withModule = !"without_module".equals(spec.asText());
            List<String> extra = new ArrayList<>();
            if (spec.isArray()) {
                spec.forEach(x -> extra.add(x.asText()));
            }
            try (RedisServer srv = new RedisServer(withModule, extra.toArray(new String[0]));
                 JedisTransport t = JedisTransport.server(srv.address(), DefaultJedisClientConfig.builder().build())) {
                for (JsonNode c : group.getValue()) {
                    srv.cmd("FLUSHALL");
                    JsonNode steps = c.get("module").get("steps");
                    ReplyError got = null;
                    for (int i = 0; i < steps.size(); i++) {
                        List<Object> args = new ArrayList<>();
                        steps.get(i).forEach(x -> args.add(x.asText()));
                        try {
                            t.call(null, Duration.ofSeconds(2), args.toArray());
                            if (i == steps.size() - 1) {
                                fail(c.get("name").asText() + ": the last step succeeded");
                            }
                        } catch (ReplyError e) {
                            if (i < steps.size() - 1) {
                                fail(c.get("name").asText() + ": step " + i + " failed: " + e.text());
                            }
                            got = e;
                        }
                    }
                    String want = c.get("reply").asText().substring(1);
                    String text = got.text();
                    if (c.get("module").path("digits_vary").asBoolean()) {
                        want = want.replaceAll("\\d+", "0");
                        text = text.replaceAll("\\d+", "0");
                    }
                    assertEquals(want, text, c.get("name").asText());
                    assertNull(ClientCasesTest.checkError(c), c.get("name").asText());
                    // And classified from what Jedis handed over, not from the case's text.
                    assertEquals(c.get("expect"), ClientCasesTest.classified(Failure.classify(got, false)), c.get("name").asText());
                }
            }
        }
    }
}
