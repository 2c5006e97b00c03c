package dev.relock.lettuce;

import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.LockOptions;
import dev.relock.NotAcquiredException;
import dev.relock.Relock;
import dev.relock.RelockAsync;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The CompletableFuture variants on Lettuce, against a real server. */
class RelockAsyncTest {
    /**
     * Hang bounds, in seconds: the first acquisition also opens the connection (Netty's event
     * loop, the handshake), which took over 5 s beside the other suites on 2 busy cores (a
     * fresh run, 2026-12-02).
     */
    static final long HANG = 30;

    @Test
    void asyncAcquireWaitsReleasesAndCancels() throws Exception {
        CountDownLatch unblock = new CountDownLatch(1);
        try (RedisServer srv = new RedisServer(); Relock locks = RelockLettuce.create(srv.uri()); RelockAsync async = RelockAsync.of(locks)) {
            // every common-pool thread blocked: the async calls must not need one
            for (int i = 0; i < ForkJoinPool.getCommonPoolParallelism() + 2; i++) {
                ForkJoinPool.commonPool().submit(() -> {
                    unblock.await();
                    return null;
                });
            }
            // Waits (free key: granted at once): the first try also opens the connection, whose
            // 1 s connect bound a busy machine missed (a fresh make test with a core busy,
            // 2026-12-05: "not connected within 1000 ms"); a wait tries again.
            Hold first = async.acquireAsync("a", LockOptions.ttl(ofSeconds(10)).waitAtMost(ofSeconds(HANG))).get(HANG, TimeUnit.SECONDS);
            CompletableFuture<Hold> waiting = async.acquireAsync("a", LockOptions.ttl(ofSeconds(10)).waitAtMost(ofSeconds(20)));
            RelockLettuceTest.eventually(ofSeconds(20), () -> locks.waiters("a", 0).size() == 1);
            assertFalse(waiting.isDone());
            assertEquals(1L, async.fencedAsync(first, "INCR", "a:n").get(HANG, TimeUnit.SECONDS));
            async.releaseAsync(first).get(HANG, TimeUnit.SECONDS);
            Hold second = waiting.get(HANG, TimeUnit.SECONDS);
            assertEquals(second.owner(), locks.info("a").orElseThrow().owner());

            // a cancelled wait leaves the server's queue, and never holds the lock
            CompletableFuture<Hold> cancelled = async.acquireAsync("a", LockOptions.ttl(ofSeconds(10)).waitAtMost(ofSeconds(20)));
            RelockLettuceTest.eventually(ofSeconds(20), () -> locks.waiters("a", 0).size() == 1);
            assertTrue(cancelled.cancel(true));
            RelockLettuceTest.eventually(ofSeconds(20), () -> locks.waiters("a", 0).isEmpty());
            async.releaseAsync(second).get(HANG, TimeUnit.SECONDS);
            assertTrue(locks.info("a").isEmpty(), "the cancelled acquisition holds nothing");

            Hold x = locks.acquire("b", LockOptions.ttl(ofSeconds(10)));
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> async.acquireAsync("b", LockOptions.ttl(ofSeconds(10))).get(HANG, TimeUnit.SECONDS));
            assertInstanceOf(NotAcquiredException.class, e.getCause());
            assertTrue(async.tryAcquireAsync("b", LockOptions.ttl(ofSeconds(10))).get(HANG, TimeUnit.SECONDS).isEmpty());
            x.release();
        } finally {
            unblock.countDown();
        }
    }
}
