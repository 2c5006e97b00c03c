package dev.relock.testing;

import static java.time.Duration.ofMillis;
import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.relock.Hold;
import dev.relock.LockOptions;
import dev.relock.Relock;
import dev.relock.RelockLock;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Virtual threads (Java 21 and later; the build targets 17, so they are reached by reflection):
 * a Lock owned by each virtual thread, and renewal while every carrier thread is kept busy.
 * Run by the pom's virtual-threads execution on a newer JVM where one is installed; skipped
 * on Java 17. Run by each adapter (relock-jedis's and relock-lettuce's VirtualThreadsTest).
 */
@Tag("virtual-threads")
public abstract class VirtualThreadCases<S extends RedisServer> extends AdapterCases<S> {

    public static ThreadFactory virtualThreads() {
        try {
            Object builder = Thread.class.getMethod("ofVirtual").invoke(null);
            return (ThreadFactory) Class.forName("java.lang.Thread$Builder").getMethod("factory").invoke(builder);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    @Test
    protected void locksOwnedByVirtualThreadsAndRenewalTheyCannotStarve() throws Exception {
        ThreadFactory vt = virtualThreads();
        assumeTrue(vt != null, "no virtual threads on Java " + Runtime.version().feature());
        ExecutorService pool = Executors.newCachedThreadPool(vt); // a virtual thread per task
        // A node timeout of 5 s, not 100 ms: what is tested is ownership and renewal, and the
        // spinning carriers (with a loaded machine) can hold a reply past 100 ms.
        try (S srv = server(); Relock locks = open(srv, Relock.Settings.defaults().nodeTimeout(ofSeconds(5)))) {
            // Mutual exclusion between virtual threads, each holding under an owner of its own.
            RelockLock lock = locks.lock("vt", ofSeconds(10));
            int[] counter = {0};
            List<Future<?>> all = new ArrayList<>();
            for (int i = 0; i < 40; i++) {
                all.add(pool.submit(() -> {
                    lock.lock();
                    try {
                        int seen = counter[0];
                        Thread.yield();
                        counter[0] = seen + 1;
                    } finally {
                        lock.unlock();
                    }
                    return null;
                }));
            }
            for (Future<?> f : all) {
                f.get(60, TimeUnit.SECONDS);
            }
            assertEquals(40, counter[0]);
            assertTrue(locks.info("vt").isEmpty());

            // Every carrier thread busy (virtual threads are not preempted): relock's renewal
            // runs on its own platform threads all the same.
            Hold h = locks.acquire("vt:hold", LockOptions.ttl(ofMillis(1500)));
            int carriers = Runtime.getRuntime().availableProcessors() + 2;
            long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(3000); // two ttls (ttl/3 renewals: six of them)
            List<Future<?>> busy = new ArrayList<>();
            for (int i = 0; i < carriers; i++) {
                busy.add(pool.submit(() -> {
                    long spins = 0;
                    while (System.nanoTime() < until) {
                        spins++;
                    }
                    return spins;
                }));
            }
            for (Future<?> f : busy) {
                f.get(30, TimeUnit.SECONDS);
            }
            assertTrue(h.isHeld(), () -> "lost: " + h.lost().getNow(null));
            h.release();
        } finally {
            pool.shutdownNow();
        }
    }
}
