package dev.relock.testing;

import static java.time.Duration.ofMillis;
import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.LockLostException;
import dev.relock.LockOptions;
import dev.relock.LossReason;
import dev.relock.Relock;
import dev.relock.RelockException;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Redlock over three independent masters, one of them paused (SIGSTOP). Run by each adapter
 * (relock-jedis's and relock-lettuce's RedlockTest).
 */
public abstract class RedlockCases<S extends RedisServer> extends AdapterCases<S> {

    @Test
    protected void aQuorumHoldsWhileOneMasterIsPaused() throws Exception {
        ExecutorService pool = Executors.newCachedThreadPool();
        try (S a = server(); S b = server(); S c = server()) {
            List<S> masters = List.of(a, b, c);
            try (Relock one = redlock(masters); Relock two = redlock(masters)) {
                assertEquals(2, one.quorum());
                Hold h = one.acquire("r", LockOptions.ttl(ofSeconds(5)));
                assertTrue(h.tokens().size() >= 2, "a quorum granted (the round ends at the quorum)");
                // Each master has its own tokens: no one token can fence a write, so none is sent.
                RelockException unfenced = assertThrows(RelockException.class, () -> h.fenced("SET", "r:data", "x"));
                assertEquals(RelockException.Kind.INVALID, unfenced.kind(), unfenced.getMessage());
                assertTrue(List.of(a, b, c).stream().allMatch(s -> Long.valueOf(0L).equals(s.cmd("EXISTS", "r:data"))));
                h.release();
                // A release not answered in time by one master goes on in the background (a
                // busy machine): the key must be gone everywhere before a master stops.
                BehaviourCases.eventually(ofSeconds(20), () -> List.of(a, b, c).stream()
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
                    BehaviourCases.eventually(ofSeconds(20), () -> ((List<?>) a.cmd("LOCK.WAITERS", "r")).size() == 1
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
    /**
     * Found in the Java review (2026-12-02, finding 7): a renewal that the quorum answered nil
     * (the lock forcereleased) was acted on only after LOCK.HISTORY asked every server why, up
     * to 500 ms a server: with a master paused, check() and isHeld() went on passing for that
     * long although the client knew the key was taken. They fail from the nil on; lost()
     * completes once the reason is in.
     */
    @Test
    protected void aRenewalAnsweredNilFailsCheckBeforeTheReasonIsIn() throws Exception {
        try (S a = server(); S b = server(); S c = server()) {
            List<S> masters = List.of(a, b, c);
            try (Relock one = redlock(masters)) {
                // The first master stopped: the journals are asked in order, and it is asked first.
                a.signal("STOP");
                try {
                    Hold h = one.acquire("n", LockOptions.ttl(ofSeconds(3)));
                    assertEquals(2, h.tokens().size());
                    b.cmd("LOCK.FORCERELEASE", "n");
                    c.cmd("LOCK.FORCERELEASE", "n");
                    // The next renewal (a third of the ttl) answers nil; then the paused master
                    // keeps LOCK.HISTORY waiting for its node timeout.
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                    while (h.isHeld()) {
                        assertTrue(System.nanoTime() < until, "the nil renewal was never seen");
                        Thread.sleep(1);
                    }
                    boolean reasonIn = h.lost().isDone();
                    assertThrows(LockLostException.class, h::check);
                    assertFalse(reasonIn, "check() passed until the loss's reason was in");
                    LossReason why = h.lost().get(30, TimeUnit.SECONDS);
                    assertFalse(why.message().isEmpty());
                } finally {
                    a.signal("CONT");
                }
            }
        }
    }
}
