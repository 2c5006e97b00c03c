// relock's Java client (Jedis adapter) against Redisson's RLock (lock(): its watchdog renews,
// waiters wake on a pub/sub message) and Spring Integration's RedisLockRegistry (its default,
// a spin lock that retries every 100 ms), on one server: uncontended acquire+release per second,
// and hand-off latency with 10 contending threads (the method of bench.py, bench.mjs and the Go
// rows). Prints one JSON line per peer. Usage: mvn -q compile exec:java -Dexec.args="PORT SECONDS HANDOFFS"
package bench;

import dev.relock.Hold;
import dev.relock.LockOptions;
import dev.relock.Relock;
import dev.relock.jedis.RelockJedis;
import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.integration.redis.util.RedisLockRegistry;
import redis.clients.jedis.RedisClient;

public final class Main {
    /** Runs body while holding key. */
    interface Using {
        void run(String key, Runnable body) throws Exception;
    }

    record Peer(String name, Using use, AutoCloseable done) {}

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: bench PORT SECONDS HANDOFFS");
            System.exit(2);
        }
        int port = Integer.parseInt(args[0]);
        double seconds = Double.parseDouble(args[1]);
        int handoffs = Integer.parseInt(args[2]);
        List<Peer> peers = peers(port);
        // Throughput in interleaved rounds (each peer in turn, five times, the median kept),
        // after a warm-up of each (the JIT too): a machine whose speed drifts during the run then
        // favours no peer by its place in the order.
        for (Peer p : peers) {
            uncontended(p.use(), Math.max(1.0, seconds));
        }
        int rounds = 5;
        List<List<Double>> ops = new ArrayList<>();
        for (int i = 0; i < peers.size(); i++) {
            ops.add(new ArrayList<>());
        }
        for (int r = 0; r < rounds; r++) {
            for (int i = 0; i < peers.size(); i++) {
                ops.get(i).add(uncontended(peers.get(i).use(), seconds / rounds));
            }
        }
        for (int i = 0; i < peers.size(); i++) {
            Peer p = peers.get(i);
            warmUp(p.use());
            double[] lat = handoff(p.use(), handoffs);
            p.done().close();
            Collections.sort(ops.get(i));
            System.out.printf(Locale.ROOT,
                    "{\"lang\": \"Java\", \"peer\": \"%s\", \"ops\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"handoffs\": %d}%n",
                    p.name(), ops.get(i).get(rounds / 2), quantile(lat, 50), quantile(lat, 99), lat.length);
        }
        System.exit(0);
    }

    static List<Peer> peers(int port) throws Exception {
        List<Peer> peers = new ArrayList<>();
        RedisClient jedis = RedisClient.create("127.0.0.1", port);
        Relock locks = RelockJedis.create(jedis);
        LockOptions options = LockOptions.ttl(Duration.ofSeconds(30)).waitForever();
        peers.add(new Peer("relock-jedis (LOCK.WAIT, renewal timer)", (key, body) -> {
            try (Hold h = locks.acquire(key, options)) {
                body.run();
            }
        }, () -> {
            locks.close();
            jedis.close();
        }));

        Config config = new Config();
        config.useSingleServer().setAddress("redis://127.0.0.1:" + port);
        RedissonClient redisson = Redisson.create(config);
        peers.add(new Peer("Redisson " + org.redisson.Version.class.getPackage().getImplementationVersion()
                + " RLock (Lua + hash, pub/sub wait, watchdog)", (key, body) -> {
            RLock l = redisson.getLock(key);
            l.lock();
            try {
                body.run();
            } finally {
                l.unlock();
            }
        }, redisson::shutdown));

        LettuceConnectionFactory factory = new LettuceConnectionFactory(new RedisStandaloneConfiguration("127.0.0.1", port));
        factory.afterPropertiesSet();
        factory.start();
        RedisLockRegistry registry = new RedisLockRegistry(factory, "bench-registry", 30_000);
        peers.add(new Peer("Spring RedisLockRegistry (SET NX + Lua, spin lock, polls every 100 ms)", (key, body) -> {
            Lock l = registry.obtain(key);
            l.lock();
            try {
                body.run();
            } finally {
                l.unlock();
            }
        }, () -> {
            registry.destroy();
            factory.destroy();
        }));
        return peers;
    }

    /**
     * Runs a peer's contended path (its waits, wake-ups and connections are not the
     * uncontended ones) unmeasured, in chunks of 500 hand-offs, until a chunk runs with the JIT
     * all but idle (under 5 ms of compiling), at most 30 chunks. A fixed 100 hand-offs was too
     * few: C2 compiled the waiting path for its first 7,000 or so, and while a compiler thread
     * ran for tens of ms, a waiter woken on its core waited for the next scheduler tick (2.7-4 ms
     * hand-offs, the p99 of a 300 hand-off run). Every peer gets the same rule.
     */
    static void warmUp(Using use) throws Exception {
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        for (int chunk = 0; chunk < 30; chunk++) {
            long before = jit.getTotalCompilationTime();
            handoff(use, 500);
            if (chunk > 0 && jit.getTotalCompilationTime() - before < 5) {
                return;
            }
        }
    }

    static double uncontended(Using use, double seconds) throws Exception {
        long n = 0;
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        while (System.nanoTime() < end) {
            use.run("bench:uncontended", () -> {});
            n++;
        }
        return n / ((System.nanoTime() - start) / 1e9);
    }

    static double[] handoff(Using use, int handoffs) throws Exception {
        String key = "bench:handoff:" + System.nanoTime();
        Object mu = new Object();
        List<Double> lat = new ArrayList<>();
        long[] released = {0};
        int[] left = {handoffs};
        int[] holder = {-1}; // the worker whose body ran last
        Throwable[] first = {null};
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 10; t++) {
            int me = t;
            Thread th = new Thread(() -> {
                while (true) {
                    synchronized (mu) {
                        // A hand-off passes the lock to another worker: one that has just
                        // released steps aside until another took it, so a lock that lets its
                        // releaser take it straight back (Redisson's RLock, a spin lock) is
                        // measured on its hand-offs, not on re-acquisitions by the same worker.
                        while (holder[0] == me && left[0] > 0 && first[0] == null) {
                            try {
                                mu.wait();
                            } catch (InterruptedException e) {
                                return;
                            }
                        }
                        if (left[0] <= 0 || first[0] != null) {
                            return;
                        }
                    }
                    try {
                        use.run(key, () -> {
                            long now = System.nanoTime();
                            synchronized (mu) {
                                if (released[0] != 0) {
                                    lat.add((now - released[0]) / 1e6);
                                }
                                left[0]--;
                                holder[0] = me;
                                mu.notifyAll();
                            }
                            try {
                                Thread.sleep(1); // a little work under the lock
                            } catch (InterruptedException e) {
                                Thread.currentThread().interrupt();
                            }
                            synchronized (mu) {
                                released[0] = System.nanoTime();
                            }
                        });
                    } catch (Throwable e) {
                        synchronized (mu) {
                            if (first[0] == null) {
                                first[0] = e;
                            }
                            mu.notifyAll();
                        }
                        return;
                    }
                }
            });
            threads.add(th);
            th.start();
        }
        for (Thread th : threads) {
            th.join(TimeUnit.MINUTES.toMillis(5));
        }
        if (first[0] != null) {
            throw new IllegalStateException("hand-off run failed", first[0]);
        }
        double[] out = lat.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        if (out.length == 0) {
            throw new IllegalStateException("no hand-off measured");
        }
        return out;
    }

    static double quantile(double[] sorted, double p) {
        return sorted[Math.min(sorted.length - 1, (int) (p / 100 * sorted.length))];
    }
}
