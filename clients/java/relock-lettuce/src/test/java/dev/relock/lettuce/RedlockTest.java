package dev.relock.lettuce;

import static java.time.Duration.ofMillis;
import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.LockOptions;
import dev.relock.Relock;
import dev.relock.RelockException;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import io.lettuce.core.RedisURI;

/** Redlock over three independent masters, one of them paused (SIGSTOP). */
class RedlockTest {

    @Test
    void aQuorumHoldsWhileOneMasterIsPaused() throws Exception {
        ExecutorService pool = Executors.newCachedThreadPool();
        try (RedisServer a = new RedisServer(); RedisServer b = new RedisServer(); RedisServer c = new RedisServer()) {
            List<RedisURI> masters = List.of(a.uri(), b.uri(), c.uri());
            try (Relock one = RelockLettuce.redlock(masters, null); Relock two = RelockLettuce.redlock(masters, null)) {
                assertEquals(2, one.quorum());
                Hold h = one.acquire("r", LockOptions.ttl(ofSeconds(5)));
                assertTrue(h.tokens().size() >= 2, "a quorum granted (the round ends at the quorum)");
                h.release();
                // A release not answered in time by one master goes on in the background (a
                // busy machine): the key must be gone everywhere before a master stops.
                RelockLettuceTest.eventually(ofSeconds(20), () -> List.of(a, b, c).stream()
                    .allMatch(s -> Long.valueOf(0L).equals(s.cmd("EXISTS", "r"))));

                c.signal("STOP");
                try {
                    long t0 = System.nanoTime();
                    Hold paused = one.acquire("r", LockOptions.ttl(ofSeconds(5)));
                    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                    assertTrue(ms < 2000, "a quorum decided in " + ms + " ms, not waiting for the paused master");
                    assertEquals(2, paused.tokens().size());
                    assertTrue(two.tryAcquire("r").isEmpty(), "the quorum excludes another owner");
                    // A waiter is granted once the holder releases, with a master still paused.
                    Future<Hold> waiter = pool.submit(() -> two.acquire("r", LockOptions.ttl(ofSeconds(5)).waitAtMost(ofSeconds(10))));
                    RelockLettuceTest.eventually(ofSeconds(20), () -> ((List<?>) a.cmd("LOCK.WAITERS", "r")).size() == 1
                        && ((List<?>) b.cmd("LOCK.WAITERS", "r")).size() == 1);
                    paused.release();
                    Hold w = waiter.get(30, TimeUnit.SECONDS);
                    assertTrue(w.tokens().size() >= 2);
                    Thread.sleep(1700); // the point: a renewal round (ttl/3) passes with the master paused
                    assertTrue(w.isHeld(), "renewed by a quorum");
                    w.release();
                } finally {
                    c.signal("CONT");
                }
                RelockException noLimit = assertThrows(RelockException.class, () -> one.acquire("s", LockOptions.ttl(ofMillis(1000)).limit(2)));
                assertEquals(RelockException.Kind.INVALID, noLimit.kind());
                assertThrows(RelockException.class, () -> one.campaign("e", "x"));
            }
        } finally {
            pool.shutdownNow();
        }
    }
}
