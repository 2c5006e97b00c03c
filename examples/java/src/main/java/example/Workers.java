// Workers sharing a counter under a relock lock, fenced writes, then a leader election.
//
// Three threads each add 1 to a counter ten times, read-modify-write, each step under the lock
// `example:counter` (a java.util.concurrent.locks.Lock: each thread waits in the key's FIFO
// queue on the server, its hold renewed while held). Without the lock, updates would be lost;
// with it the counter ends at exactly 30. A second counter is written with LOCK.FENCED: the
// server runs the INCR only while the hold's token is live. Then two candidates campaign for
// `example:leader`: the first leads, resigns, and the second leads with a larger term, as an
// observer reports.
//
//   mvn -q compile exec:java    # against $REDIS_ADDR (default 127.0.0.1:6379), with the module
package example;

import dev.relock.Hold;
import dev.relock.Leadership;
import dev.relock.LockOptions;
import dev.relock.Observation;
import dev.relock.Relock;
import dev.relock.jedis.RelockJedis;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.RedisClient;

public final class Workers {
    public static void main(String[] args) throws Exception {
        String addr = System.getenv().getOrDefault("REDIS_ADDR", "127.0.0.1:6379");
        HostAndPort at = HostAndPort.from(addr);
        try (RedisClient redis = RedisClient.create(at.getHost(), at.getPort());
                Relock locks = RelockJedis.create(redis)) {
            redis.del("example:counter:value", "{example:counter}:fenced");
            counter(redis, locks);
            election(locks);
        }
    }

    /** Three threads, ten read-modify-write steps each, every step under the lock. */
    static void counter(RedisClient redis, Relock locks) throws Exception {
        Lock lock = locks.lock("example:counter", Duration.ofSeconds(5));
        List<Thread> workers = new ArrayList<>();
        List<Throwable> failures = new java.util.concurrent.CopyOnWriteArrayList<>();
        for (int w = 0; w < 3; w++) {
            Thread t = new Thread(() -> {
                try {
                    for (int i = 0; i < 10; i++) {
                        if (!lock.tryLock(10, TimeUnit.SECONDS)) {
                            throw new IllegalStateException("not granted in 10 s");
                        }
                        try {
                            String v = redis.get("example:counter:value");
                            int n = v == null ? 0 : Integer.parseInt(v);
                            redis.set("example:counter:value", Integer.toString(n + 1));
                        } finally {
                            lock.unlock();
                        }
                    }
                } catch (Throwable e) {
                    failures.add(e);
                }
            }, "worker-" + w);
            workers.add(t);
            t.start();
        }
        for (Thread t : workers) {
            t.join();
        }
        if (!failures.isEmpty()) {
            throw new IllegalStateException("a worker failed", failures.get(0));
        }
        int n = Integer.parseInt(redis.get("example:counter:value"));
        System.out.printf("counter: %d (3 workers x 10 increments)%n", n);
        if (n != 30) {
            throw new IllegalStateException("counter is " + n + ", not 30");
        }
        // A fenced write: the server checks the token, then runs the INCR (same hash slot).
        try (Hold hold = locks.acquire("example:counter",
                LockOptions.ttl(Duration.ofSeconds(5)).waitAtMost(Duration.ofSeconds(10)))) {
            Object after = hold.fenced("INCR", "{example:counter}:fenced");
            System.out.printf("fenced INCR with token %d: %s%n", hold.token(), after);
        }
    }

    /** Campaign, observe, resign: the next candidate leads with a larger term. */
    static void election(Relock locks) throws Exception {
        BlockingQueue<Observation> seen = new LinkedBlockingQueue<>();
        try (AutoCloseable watch = locks.observe("example:leader", seen::add)) {
            Observation o = next(seen); // the current state: nobody leads
            if (o.leader() != null) {
                throw new IllegalStateException("someone leads already: " + o.leader());
            }
            Leadership first = locks.campaign("example:leader", "node-a",
                    LockOptions.ttl(Duration.ofSeconds(5)));
            System.out.printf("leader: %s, term %d%n", first.value(), first.term());
            o = next(seen);
            if (o.leader() == null || !o.leader().value().equals("node-a")) {
                throw new IllegalStateException("observed " + o);
            }
            CompletableFuture<Leadership> second = CompletableFuture.supplyAsync(() -> locks.campaign(
                    "example:leader", "node-b",
                    LockOptions.ttl(Duration.ofSeconds(5)).waitAtMost(Duration.ofSeconds(20))));
            // Resign once node-b waits in the queue: the hand-off happens in the same step.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (locks.waiters("example:leader", 0).size() != 1) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("node-b never queued");
                }
                Thread.sleep(5);
            }
            first.resign();
            Leadership next = second.get(20, TimeUnit.SECONDS);
            do {
                o = next(seen);
            } while (o.leader() == null);
            System.out.printf("observed: %s leads, term %d (was %d)%n",
                    o.leader().value(), o.leader().term(), first.term());
            if (!o.leader().value().equals("node-b") || next.term() <= first.term()) {
                throw new IllegalStateException("observed " + o);
            }
            next.resign();
        }
    }

    static Observation next(BlockingQueue<Observation> seen) throws InterruptedException {
        Observation o = seen.poll(20, TimeUnit.SECONDS);
        if (o == null) {
            throw new IllegalStateException("no observation in 20 s");
        }
        if (o.error() != null) {
            throw o.error();
        }
        return o;
    }
}
