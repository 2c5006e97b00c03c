package dev.relock.lettuce;

import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.Leadership;
import dev.relock.LockOptions;
import dev.relock.LossReason;
import dev.relock.Relock;
import dev.relock.RelockException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.SlotHash;

/**
 * A Redis Cluster of three masters with the module (and a replica for the failover), started by
 * the test: keys on every master, waits on the key's master's own connection, a semaphore, a
 * group under one hash tag, a fenced write, a loss with its reason, an election; then the key's
 * master fails over (CLUSTER FAILOVER) and the hold, its renewal and a fenced write follow to
 * the new master.
 */
class ClusterTest {

    static RedisServer node() throws Exception {
        return new RedisServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "2000", "--cluster-port", String.valueOf(RedisServer.freePort()));
    }

    static String text(Object v) {
        return String.valueOf(v);
    }

    @Test
    void clusterAndFailover() throws Exception {
        ExecutorService pool = Executors.newCachedThreadPool();
        List<RedisServer> nodes = new ArrayList<>();
        try {
            for (int i = 0; i < 3; i++) {
                nodes.add(node());
            }
            List<String> cmd = new ArrayList<>(List.of("redis-cli", "--cluster", "create"));
            for (RedisServer n : nodes) {
                cmd.add("127.0.0.1:" + n.port);
            }
            cmd.addAll(List.of("--cluster-replicas", "0", "--cluster-yes"));
            // redis-cli waits, with no bound of its own, until every node knows every other (at
            // load 12 a create ran past 120 s): past 90 s it is killed and the test fails.
            java.nio.file.Path log = java.nio.file.Files.createTempFile("cluster-create", ".log");
            Process create = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(log.toFile()).start();
            boolean ended = create.waitFor(90, TimeUnit.SECONDS);
            if (!ended) {
                create.destroyForcibly().waitFor();
            }
            String out = java.nio.file.Files.readString(log);
            java.nio.file.Files.deleteIfExists(log);
            assertTrue(ended, "redis-cli --cluster create still running after 90 s:\n" + out);
            assertEquals(0, create.exitValue(), out);
            RelockLettuceTest.eventually(ofSeconds(60), () -> nodes.stream().allMatch(n -> {
                String info = text(n.cmd("CLUSTER", "INFO"));
                return info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3");
            }));

            RedisClusterClient app = RedisClusterClient.create(nodes.get(0).uri());
            try (Relock locks = RelockLettuce.cluster(app, Relock.Settings.defaults().nodeTimeout(java.time.Duration.ofSeconds(1)))) {
                Set<String> masters = new HashSet<>();
                for (int i = 0; i < 6; i++) {
                    String key = "order:" + i;
                    Hold h = locks.acquire(key, LockOptions.ttl(ofSeconds(5)));
                    masters.add(masterOf(nodes, key));
                    assertEquals(h.owner(), locks.info(key).orElseThrow().owner());
                    Future<?> waiter = pool.submit(() -> locks.acquire(key, LockOptions.ttl(ofSeconds(5)).waitAtMost(ofSeconds(20))).release());
                    RelockLettuceTest.eventually(ofSeconds(10), () -> locks.waiters(key, 0).size() == 1);
                    h.release();
                    waiter.get(30, TimeUnit.SECONDS);
                }
                assertTrue(masters.size() >= 2, "keys on " + masters.size() + " masters only");
                locks.semaphore("{gpu}", 2).acquire(1, ofSeconds(5), java.time.Duration.ZERO).release();
                locks.acquireAll(List.of("{acct}:1", "{acct}:2"), LockOptions.ttl(ofSeconds(5))).release();
                try (Hold f = locks.acquire("{order:8}", LockOptions.ttl(ofSeconds(5)))) {
                    assertEquals("OK", f.fenced("SET", "{order:8}:data", "v"));
                }
                Hold lost = locks.acquire("order:9", LockOptions.ttl(ofSeconds(3)));
                assertEquals(1L, byKey(nodes, "order:9").cmd("DEL", "order:9"));
                LossReason why = lost.lost().get(3, TimeUnit.SECONDS);
                assertEquals("deleted", why.cause());
                Leadership l = locks.campaign("{svc}:leader", "n1", LockOptions.ttl(ofSeconds(3)).waitForever());
                assertEquals(l.term(), locks.leader("{svc}:leader").orElseThrow().term());
                l.resign();
                RelockException twoSlots = assertThrows(RelockException.class, () -> locks.acquireAll(List.of("a", "b"), LockOptions.ttl(ofSeconds(5))));
                assertNotEquals(RelockException.Kind.NOT_ACQUIRED, twoSlots.kind(), twoSlots.getMessage());
            } finally {
                app.shutdown();
            }

            // The failover: a replica of the key's master joins, then takes over (CLUSTER FAILOVER).
            String key = "{fo}";
            RedisServer master = byKey(nodes, key);
            String mid = text(master.cmd("CLUSTER", "MYID"));
            Object cport = infoMap(master.cmd("CONFIG", "GET", "cluster-port")).get("cluster-port");
            RedisServer replica = node();
            nodes.add(replica);
            String rid = text(replica.cmd("CLUSTER", "MYID"));
            replica.cmd("CLUSTER", "MEET", "127.0.0.1", String.valueOf(master.port), text(cport));
            RelockLettuceTest.eventually(ofSeconds(30), () -> {
                String nodesOut = text(replica.cmd("CLUSTER", "NODES"));
                return nodesOut.contains(mid) && !nodesOut.contains("handshake");
            });
            replica.cmd("CLUSTER", "REPLICATE", mid);
            RelockLettuceTest.eventually(ofSeconds(30), () -> text(replica.cmd("INFO", "replication")).contains("master_link_status:up")
                && nodes.stream().allMatch(n -> text(n.cmd("CLUSTER", "NODES")).contains(rid)));

            try (Relock locks = RelockLettuce.cluster(List.of(nodes.get(0).uri()), null,
                    Relock.Settings.defaults().nodeTimeout(java.time.Duration.ofSeconds(1)))) {
                // A ttl long enough that no renewal runs between the grant and the checks: the
                // first commands after the failover go by the slot map of before.
                Hold h = locks.acquire(key, LockOptions.ttl(ofSeconds(60)));
                long token = h.token();
                assertEquals("OK", h.fenced("SET", key + ":data", "before"));
                replica.cmd("CLUSTER", "FAILOVER");
                RelockLettuceTest.eventually(ofSeconds(30), () -> text(replica.cmd("INFO", "replication")).contains("role:master")
                    && text(master.cmd("INFO", "replication")).contains("role:slave"));
                // The roles switch before every node has the new epoch: until then a node may still
                // map the slot to the old master, now a replica, and a client that reads its map
                // there finds no master for the slot (a make test at load 11 renewed in that window).
                RelockLettuceTest.eventually(ofSeconds(30), () -> nodes.stream().allMatch(n -> {
                    String self = text(n.cmd("CLUSTER", "NODES")).lines()
                        .filter(line -> line.startsWith(rid + " ")).findFirst().orElse("");
                    return text(n.cmd("CLUSTER", "INFO")).contains("cluster_state:ok")
                        && self.split(" ").length > 2 && self.split(" ")[2].contains("master");
                }));
                assertEquals("OK", h.fenced("SET", key + ":data", "after"), "the fenced write follows MOVED to the new master");
                h.renew();
                assertTrue(h.isHeld());
                assertEquals("after", replica.cmd("GET", key + ":data"));
                Map<?, ?> info = infoMap(replica.cmd("LOCK.INFO", key));
                assertEquals(h.owner(), text(info.get("owner")));
                assertEquals(token, info.get("token"));
                h.release();
                assertEquals(0L, replica.cmd("EXISTS", key));
            }
        } finally {
            pool.shutdownNow();
            for (RedisServer n : nodes) {
                n.close();
            }
        }
    }

    /** A map reply under RESP3 (a Map) or RESP2 (a flat list). */
    static Map<?, ?> infoMap(Object reply) {
        if (reply instanceof Map<?, ?> m) {
            return m;
        }
        List<?> l = (List<?>) reply;
        Map<Object, Object> m = new java.util.HashMap<>();
        for (int i = 0; i + 1 < l.size(); i += 2) {
            m.put(text(l.get(i)), l.get(i + 1));
        }
        return m;
    }

    /** The node that serves key's slot now (CLUSTER SLOTS of the first node). */
    static RedisServer byKey(List<RedisServer> nodes, String key) {
        String addr = masterOf(nodes, key);
        for (RedisServer n : nodes) {
            if (("127.0.0.1:" + n.port).equals(addr)) {
                return n;
            }
        }
        throw new AssertionError("no node serves " + key);
    }

    static String masterOf(List<RedisServer> nodes, String key) {
        int slot = SlotHash.getSlot(key);
        for (Object r : (List<?>) nodes.get(0).cmd("CLUSTER", "SLOTS")) {
            List<?> range = (List<?>) r;
            if ((Long) range.get(0) <= slot && slot <= (Long) range.get(1)) {
                List<?> m = (List<?>) range.get(2);
                return text(m.get(0)) + ":" + m.get(1);
            }
        }
        throw new AssertionError("slot " + slot + " is not served");
    }
}
