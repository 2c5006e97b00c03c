package dev.relock.jedis;

import static dev.relock.testing.BehaviourCases.eventually;
import static dev.relock.testing.BehaviourCases.ttl;
import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import dev.relock.Hold;
import dev.relock.Info;
import dev.relock.Leadership;
import dev.relock.NotAcquiredException;
import dev.relock.Relock;
import dev.relock.RelockAsync;
import dev.relock.RelockLock;
import dev.relock.Transport;
import dev.relock.Waiter;
import java.lang.reflect.Field;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import dev.relock.testing.InThreadWaitCases;

/**
 * The in-thread wait's attacks (relock-core's {@link InThreadWaitCases}) through Jedis, and one
 * more that needs a transport of its own: a {@code Connection.abort()} that throws.
 */
class InThreadWaitAttackTest extends InThreadWaitCases<RedisServer> {
    @Override
    protected RedisServer server() throws Exception {
        return new RedisServer();
    }

    @Override
    protected Relock open(RedisServer s) {
        return RelockJedis.create(s.address(), null);
    }

    /**
     * One Connection.abort() that throws (a Transport is a public SPI; an adapter of the
     * application's) is run by the watch's timer task: an exception there ends a
     * scheduleWithFixedDelay task for good, while InterruptWatch.task stays non-null, so
     * watch() never starts it again. Every later interrupt of every platform thread's wait, in
     * every Relock of the JVM, is then never cut.
     */
    @Test
    protected void aThrowingAbortDoesNotEndTheWatchForEveryLaterWait() throws Exception {
        AtomicBoolean throwOnce = new AtomicBoolean();
        Transport inner = JedisTransport.server(srv.address(), redis.clients.jedis.DefaultJedisClientConfig.builder().build());
        Transport faulty = new ThrowingAbort(inner, throwOnce);
        Hold h = admin.acquire(k, ttl(300_000));
        Relock faultySide = Relock.create(faulty);
        Relock healthySide = client();
        try {
            Acquirer first = new Acquirer("faulty", () -> faultySide.acquire(k, ttl(60_000).waitForever()));
            first.start();
            eventually(ofSeconds(20), () -> waiters() == 1);
            throwOnce.set(true);
            first.interrupt();
            first.join(30_000);
            assertFalse(first.isAlive(), "the first wait was cut (its socket closed before abort threw)");
            eventually(ofSeconds(20), () -> waiters() == 0);

            // Another client, another thread: an ordinary interrupted wait.
            Acquirer second = new Acquirer("healthy", () -> healthySide.acquire(k, ttl(60_000).waitForever()));
            second.start();
            eventually(ofSeconds(20), () -> waiters() == 1);
            second.interrupt();
            second.join(20_000);
            if (second.isAlive()) {
                Future<?> task;
                synchronized (classOf()) {
                    task = (Future<?>) watchField("task");
                }
                String state = task == null ? "null" : "done=" + task.isDone();
                // Unblock it (close cuts it) and restore the watch for the rest of this JVM.
                healthySide.close();
                second.join(30_000);
                restartWatch();
                fail("after one abort threw in the watch's timer task, an interrupted wait of another Relock was never cut"
                    + " within 20 s (InterruptWatch.task: " + state + ", watched: " + watched() + ")");
            }
            assertInstanceOf(NotAcquiredException.class, second.result.get());
        } finally {
            faultySide.close();
            healthySide.close();
            h.release();
        }
        watchIsIdle();
    }

    /** Test repair only: a dead watch task is forgotten so the next watch() schedules a new one. */
    static void restartWatch() {
        synchronized (classOf()) {
            try {
                Field f = classOf().getDeclaredField("task");
                f.setAccessible(true);
                Future<?> t = (Future<?>) f.get(null);
                if (t != null && t.isDone()) {
                    f.set(null, null);
                }
            } catch (ReflectiveOperationException e) {
                throw new AssertionError(e);
            }
        }
    }

    /** Jedis's transport whose Connection.abort() throws once (after closing the socket) when asked to. */
    static final class ThrowingAbort implements Transport {
        private final Transport inner;
        private final AtomicBoolean throwOnce;

        ThrowingAbort(Transport inner, AtomicBoolean throwOnce) {
            this.inner = inner;
            this.throwOnce = throwOnce;
        }

        @Override
        public String name() {
            return inner.name();
        }

        @Override
        public boolean isCluster() {
            return inner.isCluster();
        }

        @Override
        public Object call(String key, Duration timeout, Object... args) {
            return inner.call(key, timeout, args);
        }

        @Override
        public Connection dedicated(String key) {
            Connection c = inner.dedicated(key);
            return new Connection() {
                @Override
                public String address() {
                    return c.address();
                }

                @Override
                public Object call(Duration bound, Object... args) {
                    return c.call(bound, args);
                }

                @Override
                public List<Object> pipeline(Duration bound, List<Object[]> commands) {
                    return c.pipeline(bound, commands);
                }

                @Override
                public void abort() {
                    c.abort();
                    if (throwOnce.getAndSet(false)) {
                        throw new IllegalStateException("abort failed (test)");
                    }
                }

                @Override
                public void close() {
                    c.close();
                }
            };
        }

        @Override
        public Object callOnce(String key, Duration timeout, Object... args) {
            return inner.callOnce(key, timeout, args);
        }

        @Override
        public List<Object> callEachMaster(Duration timeout, Object... args) {
            return inner.callEachMaster(timeout, args);
        }

        @Override
        public void close() {
            inner.close();
        }
    }

}
