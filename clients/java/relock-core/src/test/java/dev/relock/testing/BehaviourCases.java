package dev.relock.testing;

import static java.time.Duration.ofMillis;
import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.Info;
import dev.relock.Leadership;
import dev.relock.LockLostException;
import dev.relock.LockOptions;
import dev.relock.LossReason;
import dev.relock.NotAcquiredException;
import dev.relock.Observation;
import dev.relock.Relock;
import dev.relock.RelockException;
import dev.relock.RelockLock;
import dev.relock.RelockSemaphore;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReadWriteLock;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.TestInstance;

/**
 * The behaviour cases every adapter passes on a real server: acquire, FIFO wait, renewal, the
 * loss with its reason within the validity, read-write locks, semaphores, several keys, the
 * {@code Lock} view, downgrade, elections, fenced writes, close. Each adapter's test class
 * extends it with how to reach a server ({@link #server()}, {@link #open}) and adds the cases
 * of its own driver (timeouts, pools, protocols, pipelines).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
public abstract class BehaviourCases<S extends RedisServer> {
    protected S srv;
    protected Relock locks;
    protected ExecutorService pool;
    protected String k;

    /** A server of the test's own. */
    protected abstract S server() throws Exception;

    /** A Relock on server s, through this adapter, with its defaults. */
    protected abstract Relock open(S s);

    @BeforeAll
    protected void start() throws Exception {
        srv = server();
    }

    @AfterAll
    protected void stop() {
        srv.close();
    }

    @BeforeEach
    protected void open(TestInfo info) {
        locks = open(srv);
        pool = Executors.newCachedThreadPool();
        k = "t:" + info.getTestMethod().get().getName();
    }

    @AfterEach
    protected void closeAll() {
        pool.shutdownNow();
        locks.close();
    }

    /** Waits for cond (an event) up to d, failing after. */
    public static void eventually(Duration d, BooleanSupplier cond) throws InterruptedException {
        long until = System.nanoTime() + d.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > until) {
                throw new AssertionError("not within " + d);
            }
            Thread.sleep(10);
        }
    }

    public static LockOptions ttl(long ms) {
        return LockOptions.ttl(ofMillis(ms));
    }

    @Test
    protected void acquireAndRelease() {
        Hold h = locks.acquire(k, ttl(10_000));
        assertTrue(h.token() > 0);
        assertEquals(h.owner(), locks.info(k).orElseThrow().owner());
        assertThrows(NotAcquiredException.class, () -> locks.acquire(k));
        assertTrue(locks.tryAcquire(k).isEmpty());
        h.release();
        assertTrue(locks.info(k).isEmpty());
        h.release(); // twice: nothing
        assertFalse(h.isHeld());
        assertThrows(IllegalStateException.class, h::check);
        try (Hold again = locks.acquire(k, ttl(10_000))) {
            assertTrue(again.token() > h.token(), "tokens never go backwards");
        }
        assertTrue(locks.info(k).isEmpty(), "try-with-resources released it");
    }

    @Test
    protected void fifoWait() throws Exception {
        Hold first = locks.acquire(k, ttl(10_000));
        List<String> order = Collections.synchronizedList(new ArrayList<>());
        Future<?> one = pool.submit(() -> {
            Hold h = locks.acquire(k, ttl(10_000).waitAtMost(ofSeconds(20)));
            order.add("one");
            h.release();
        });
        eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 1);
        Future<?> two = pool.submit(() -> {
            Hold h = locks.acquire(k, ttl(10_000).waitAtMost(ofSeconds(20)));
            order.add("two");
            h.release();
        });
        eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 2);
        assertTrue(order.isEmpty());
        first.release();
        one.get(30, TimeUnit.SECONDS);
        two.get(30, TimeUnit.SECONDS);
        assertEquals(List.of("one", "two"), order);
    }

    @Test
    protected void aBoundedWaitEndsNotAcquiredAndLeavesTheQueue() throws Exception {
        Hold h = locks.acquire(k, ttl(10_000));
        long t0 = System.nanoTime();
        assertThrows(NotAcquiredException.class, () -> locks.acquire(k, ttl(10_000).waitAtMost(ofMillis(300))));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(ms >= 250 && ms < 5000, "waited " + ms + " ms");
        assertTrue(locks.waiters(k, 0).isEmpty());
        h.release();
    }

    @Test
    protected void renewedWhileHeld() throws Exception {
        Hold h = locks.acquire(k, ttl(900));
        Thread.sleep(2000); // the point of the test: more than two ttls pass while held
        assertTrue(h.isHeld());
        Info info = locks.info(k).orElseThrow();
        assertEquals(h.owner(), info.owner());
        assertEquals(h.token(), info.token());
        h.renew();
        assertTrue(h.validFor().toMillis() > 600);
        h.release();
    }

    @Test
    protected void lossSignalCarriesTheReasonWithinTheValidity() throws Exception {
        Hold h = locks.acquire(k, ttl(3000));
        long t0 = System.nanoTime();
        assertEquals(1L, srv.cmd("LOCK.FORCERELEASE", k));
        LossReason why = h.lost().get(3, TimeUnit.SECONDS);
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(ms < 3000, "loss seen after " + ms + " ms, past the validity");
        assertEquals("forcereleased", why.cause());
        assertTrue(why.message().contains("LOCK.FORCERELEASE"), why.message());
        LockLostException e = assertThrows(LockLostException.class, h::check);
        assertEquals("forcereleased", e.reason().cause());
        assertThrows(LockLostException.class, h::release, "release after a loss says lost");
    }

    @Test
    protected void lossWhenTheServerStopsAnsweringComesBeforeTheTtl() throws Exception {
        try (S own = server(); Relock mine = open(own)) {
            Hold h = mine.acquire(k, ttl(1000));
            long t0 = System.nanoTime();
            own.signal("STOP");
            try {
                h.lost().get(30, TimeUnit.SECONDS);
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(ms < 1000, "reported lost " + ms + " ms after the last grant, at or past the ttl");
                assertThrows(LockLostException.class, h::check);
            } finally {
                own.signal("CONT");
            }
        }
    }

    @Test
    protected void readWriteLockShares() throws Exception {
        ReadWriteLock rw = locks.readWriteLock(k, ofSeconds(10));
        CountDownLatch held = new CountDownLatch(2);
        CountDownLatch done = new CountDownLatch(1);
        List<Future<?>> readers = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            readers.add(pool.submit(() -> {
                rw.readLock().lock();
                held.countDown();
                done.await();
                rw.readLock().unlock();
                return null;
            }));
        }
        assertTrue(held.await(5, TimeUnit.SECONDS), "two readers at once");
        Info info = locks.info(k).orElseThrow();
        assertEquals("shared", info.mode());
        assertEquals(2, info.holders());
        assertFalse(pool.submit(() -> rw.writeLock().tryLock(200, TimeUnit.MILLISECONDS)).get());
        Future<Boolean> writer = pool.submit(() -> {
            boolean got = rw.writeLock().tryLock(10, TimeUnit.SECONDS);
            if (got) {
                rw.writeLock().unlock();
            }
            return got;
        });
        eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 1);
        done.countDown();
        for (Future<?> r : readers) {
            r.get(30, TimeUnit.SECONDS);
        }
        assertTrue(writer.get(30, TimeUnit.SECONDS), "the writer after the readers");
    }

    @Test
    protected void semaphorePermits() {
        RelockSemaphore s = locks.semaphore(k, 3);
        Hold two = s.acquire(2, ofSeconds(10), Duration.ZERO);
        Hold one = s.acquire(1, ofSeconds(10), Duration.ZERO);
        assertTrue(s.tryAcquire(ofSeconds(10)).isEmpty());
        assertEquals(0, s.availablePermits());
        assertEquals(List.of(2L, 1L), locks.holders(k, 0).stream().map(h -> h.permits()).toList());
        two.release();
        assertEquals(2, s.availablePermits());
        Hold again = s.acquire(2, ofSeconds(10), Duration.ZERO);
        RelockException other = assertThrows(RelockException.class, () -> locks.acquire(k, ttl(1000).limit(4)));
        assertEquals(RelockException.Kind.OTHER_LIMIT, other.kind());
        assertEquals(3, other.limit());
        again.release();
        one.release();
        assertEquals(3, s.availablePermits());
    }

    @Test
    protected void severalKeysAtOnce() throws Exception {
        List<String> keys = List.of(k + ":b", k + ":a");
        Hold other = locks.acquire(k + ":b", ttl(10_000));
        assertThrows(NotAcquiredException.class, () -> locks.acquireAll(keys, ttl(10_000)));
        assertTrue(locks.info(k + ":a").isEmpty(), "all or nothing");
        Future<Hold> group = pool.submit(() -> locks.acquireAll(keys, ttl(10_000).waitAtMost(ofSeconds(10))));
        eventually(ofSeconds(20), () -> locks.waiters(k + ":b", 0).size() == 1);
        other.release();
        Hold g = group.get(30, TimeUnit.SECONDS);
        assertEquals(keys, g.keys());
        for (String key : keys) {
            assertEquals(g.owner(), locks.info(key).orElseThrow().owner());
            assertTrue(g.tokenOf(key) > 0);
        }
        g.renew();
        g.release();
        for (String key : keys) {
            assertTrue(locks.info(key).isEmpty());
        }
    }

    @Test
    protected void lockIsThreadOwnedAndReentrant() throws Exception {
        RelockLock l = locks.lock(k, ofSeconds(10));
        l.lock();
        l.lock();
        assertEquals(2, l.getHoldCount());
        assertEquals(2, locks.holders(k, 0).get(0).count());
        assertFalse(pool.submit(() -> l.tryLock()).get(), "another thread is excluded");
        ExecutionException e = assertThrows(ExecutionException.class, () -> pool.submit(() -> {
            l.unlock();
            return null;
        }).get());
        assertInstanceOf(IllegalMonitorStateException.class, e.getCause());
        l.unlock();
        assertEquals(1, locks.holders(k, 0).get(0).count());
        l.unlock();
        assertTrue(locks.info(k).isEmpty());
        assertThrows(IllegalMonitorStateException.class, l::unlock);
    }

    /**
     * Found in the Java review (2026-12-02, finding 6): a thread that ended holding a Lock (an
     * Error, a task cancelled between lock() and try) kept it renewed until the process exited,
     * and no other thread could unlock it. Its hold is given back at the next renewal.
     */
    @Test
    protected void aLockWhoseThreadEndedIsGivenBackNotRenewedForEver() throws Exception {
        RelockLock l = locks.lock(k, ofSeconds(3));
        Thread t = new Thread(() -> {
            l.lock();
            l.lock();
        }, "ends-holding");
        t.start();
        t.join(30_000);
        assertFalse(t.isAlive(), "the thread's lock() never returned");
        assertEquals(2, locks.holders(k, 0).get(0).count(), "held twice by the ended thread");
        // Given back at the next renewal (a third of the ttl); renewed, it would be held for ever.
        eventually(ofSeconds(10), () -> locks.info(k).isEmpty());
        assertTrue(l.tryLock(10, TimeUnit.SECONDS), "another thread takes it");
        assertEquals(1, l.getHoldCount());
        l.unlock();
        assertTrue(locks.info(k).isEmpty());
    }

    @Test
    protected void aNestedLockAfterALossThrowsAndNeverTakesAFreshHold() throws Exception {
        RelockLock l = locks.lock(k, ofSeconds(10));
        l.lock();
        assertEquals(1L, srv.cmd("LOCK.FORCERELEASE", k));
        l.hold().lost().get(30, TimeUnit.SECONDS);
        Hold other = locks.acquire(k, ttl(10_000));
        other.release();
        assertThrows(LockLostException.class, l::lock, "nested lock() after the loss");
        assertThrows(LockLostException.class, l::tryLock, "nested tryLock() after the loss");
        assertThrows(LockLostException.class, l::lockInterruptibly, "nested lockInterruptibly() after the loss");
        assertTrue(locks.info(k).isEmpty(), "no second holder");
        assertEquals(1, l.getHoldCount(), "the outer section's unlock is still owed");
        Hold p = locks.acquire(k, ttl(10_000));
        assertThrows(LockLostException.class, l::unlock, "the outer unlock says lost");
        assertTrue(p.isHeld());
        assertEquals(p.owner(), locks.holders(k, 0).get(0).owner(), "the other holder's lock is untouched");
        p.release();
        assertThrows(IllegalMonitorStateException.class, l::unlock);
    }

    @Test
    protected void lockAfterCloseThrowsInsteadOfSpinning() throws Exception {
        Relock own = open(srv);
        RelockLock l = own.lock(k, ofSeconds(10));
        own.close();
        Future<?> a = pool.submit(() -> {
            l.lock();
            return null;
        });
        Future<?> b = pool.submit(() -> {
            l.lockInterruptibly();
            return null;
        });
        for (Future<?> f : List.of(a, b)) {
            ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(30, TimeUnit.SECONDS));
            assertInstanceOf(IllegalStateException.class, e.getCause());
        }
    }

    @Test
    protected void anInterruptedWaitEndsAndLeavesTheQueue() throws Exception {
        Hold h = locks.acquire(k, ttl(10_000));
        RelockLock l = locks.lock(k, ofSeconds(10));
        Future<?> waiter = pool.submit(() -> {
            l.lockInterruptibly();
            return null;
        });
        eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 1);
        waiter.cancel(true);
        eventually(ofSeconds(20), () -> locks.waiters(k, 0).isEmpty());
        h.release();
        assertTrue(locks.info(k).isEmpty(), "the interrupted waiter did not take it");
    }

    @Test
    protected void downgradeGrantsTheSharedWaiters() throws Exception {
        Hold h = locks.acquire(k, ttl(10_000));
        Future<Hold> reader = pool.submit(() -> locks.acquire(k, ttl(10_000).shared().waitAtMost(ofSeconds(10))));
        eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 1);
        h.downgrade();
        Hold r = reader.get(30, TimeUnit.SECONDS);
        Info info = locks.info(k).orElseThrow();
        assertEquals("shared", info.mode());
        assertEquals(2, info.holders());
        r.release();
        h.release();
        assertTrue(locks.info(k).isEmpty());
    }

    @Test
    protected void election() throws Exception {
        Leadership a = locks.campaign(k, "node-a", LockOptions.ttl(ofSeconds(10)).waitForever());
        assertEquals("node-a", locks.leader(k).orElseThrow().value());
        assertEquals(a.term(), locks.leader(k).orElseThrow().term());
        List<Observation> seen = new CopyOnWriteArrayList<>();
        try (AutoCloseable obs = locks.observe(k, seen::add)) {
            eventually(ofSeconds(20), () -> !seen.isEmpty());
            assertEquals("node-a", seen.get(0).leader().value());
            Future<Leadership> b = pool.submit(() -> locks.campaign(k, "node-b", LockOptions.ttl(ofSeconds(10)).waitForever()));
            eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 1);
            a.resign();
            Leadership lb = b.get(30, TimeUnit.SECONDS);
            assertTrue(lb.term() > a.term());
            eventually(ofSeconds(20), () -> {
                Observation last = seen.get(seen.size() - 1);
                return last.leader() != null && last.leader().value().equals("node-b");
            });
            assertTrue(seen.stream().noneMatch(Observation::regressed));
            lb.resign();
            eventually(ofSeconds(20), () -> seen.get(seen.size() - 1).leader() == null);
        }
    }

    @Test
    protected void fencedWritesRunOnlyForTheLiveHold() {
        Hold h = locks.acquire(k, ttl(10_000));
        assertEquals(1L, h.fenced("INCR", k + ":n"));
        assertEquals(1L, srv.cmd("LOCK.FORCERELEASE", k));
        RelockException e = assertThrows(RelockException.class, () -> h.fenced("INCR", k + ":n"));
        assertEquals(RelockException.Kind.FENCED, e.kind());
        assertEquals("1", srv.cmd("GET", k + ":n"));
    }

    @Test
    protected void aFencedWriteWhoseReplyIsLostRunsAtMostOnce() throws Exception {
        try (S own = server(); Relock mine = open(own)) {
            Hold h = mine.acquire(k, ttl(30_000));
            own.signal("STOP");
            // The fault staged: the server continues 1.5 s later, after the fenced call's 1 s
            // bound (its reply is then late, not lost), so a re-send after the timeout would run.
            Future<?> resume = pool.submit(() -> {
                Thread.sleep(1500); // marked: the staged fault's length, not a wait for an event
                own.signal("CONT");
                return null;
            });
            RelockException e;
            try {
                e = assertThrows(RelockException.class, () -> h.fenced("INCR", k + ":n"));
            } finally {
                resume.get(30, TimeUnit.SECONDS);
            }
            assertEquals(RelockException.Kind.MAY_HAVE_RUN, e.kind(), e.getMessage());
            // The server ran what it had received once it continued: once, never twice.
            eventually(ofSeconds(20), () -> own.cmd("GET", k + ":n") != null);
            Thread.sleep(500); // marked: room for a re-send, were there one, to land
            assertEquals("1", own.cmd("GET", k + ":n"));
            h.release();
        }
    }

    @Test
    protected void renewalIsNotStarvedByABusyCommonPoolOrCaller() throws Exception {
        Hold h = locks.acquire(k, ttl(1500));
        int n = ForkJoinPool.getCommonPoolParallelism() + 2;
        CountDownLatch release = new CountDownLatch(1);
        List<Future<?>> busy = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            busy.add(ForkJoinPool.commonPool().submit(() -> {
                release.await(); // every common-pool thread blocked
                return null;
            }));
        }
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(3000); // two ttls (ttl/3 renewals: six of them)
        long spins = 0;
        while (System.nanoTime() < until) {
            spins++; // the caller busy, never yielding to relock
        }
        assertTrue(spins > 0);
        try {
            assertTrue(h.isHeld(), () -> "renewed on relock's own threads, but: " + h.lost().getNow(null));
            assertEquals(h.owner(), locks.info(k).orElseThrow().owner());
        } finally {
            release.countDown();
        }
        h.release();
    }

    /**
     * The application's executor given to RelockAsync exhausted (its one thread blocked): a hold
     * is renewed all the same (relock's own threads), a call queued behind the block and
     * cancelled never runs, and one given to an executor that rejects work fails at once.
     */
    @Test
    protected void anExhaustedOrRejectingApplicationExecutorStarvesNothingOfRelocks() throws Exception {
        ExecutorService one = Executors.newFixedThreadPool(1);
        CountDownLatch unblock = new CountDownLatch(1);
        try {
            Hold h = locks.acquire(k, ttl(1500));
            one.submit(() -> {
                unblock.await(); // the application's only thread, blocked
                return null;
            });
            dev.relock.RelockAsync async = dev.relock.RelockAsync.of(locks, one);
            java.util.concurrent.CompletableFuture<java.util.Optional<Hold>> queued =
                async.tryAcquireAsync(k + ":queued", ttl(10_000));
            Thread.sleep(3000); // marked: two ttls (six renewals due) with the executor blocked
            assertTrue(h.isHeld(), () -> "renewed on relock's own threads, but: " + h.lost().getNow(null));
            assertFalse(queued.isDone(), "the queued call waits for the application's thread");
            assertTrue(queued.cancel(true));
            unblock.countDown();
            one.shutdown();
            assertTrue(one.awaitTermination(30, TimeUnit.SECONDS));
            assertTrue(locks.info(k + ":queued").isEmpty(), "a call cancelled before it started never ran");
            // The executor shut down: it rejects, and the call fails at once, not a future left pending.
            java.util.concurrent.CompletableFuture<Hold> rejected = async.acquireAsync(k + ":rejected", ttl(10_000));
            ExecutionException e = assertThrows(ExecutionException.class, () -> rejected.get(5, TimeUnit.SECONDS));
            assertInstanceOf(java.util.concurrent.RejectedExecutionException.class, e.getCause());
            assertTrue(locks.info(k + ":rejected").isEmpty());
            h.release();
        } finally {
            unblock.countDown();
            one.shutdownNow();
        }
    }

    /**
     * A renewal whose reply never comes (the server stopped while it is in flight: relock's
     * bound passes and it closes that connection; the server runs the renewal once it goes on)
     * is not a loss: the hold is renewed again and outlives its first ttl several times.
     */
    @Test
    protected void aRenewalWhoseReplyIsLostIsNotALoss() throws Exception {
        try (S own = server(); Relock mine = open(own)) {
            Hold h = mine.acquire(k, ttl(3000));
            long start = System.nanoTime();
            Thread.sleep(800); // marked: the first renewal is due at 1,000 ms (ttl/3)
            own.signal("STOP");
            try {
                Thread.sleep(700); // marked: that renewal is sent into the stopped server and times out
            } finally {
                own.signal("CONT");
            }
            while (System.nanoTime() - start < TimeUnit.MILLISECONDS.toNanos(7000)) {
                assertTrue(h.isHeld(), () -> "lost: " + h.lost().getNow(null));
                Thread.sleep(50); // marked: watching the hold over two ttls past the first
            }
            h.check();
            assertEquals(h.owner(), mine.info(k).orElseThrow().owner());
            h.release();
            assertTrue(mine.info(k).isEmpty());
        }
    }

    @Test
    protected void aHoldSurvivesItsConnectionsKilledBetweenRenewals() throws Exception {
        Hold h = locks.acquire(k, ttl(900));
        for (int i = 0; i < 3; i++) {
            // relock's connections dropped by the server (a restart of a proxy, a CLIENT KILL):
            // the next renewal opens a new one, nothing is re-sent blindly.
            srv.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
            Thread.sleep(300); // marked: a renewal (every ttl/3) runs after each kill
        }
        assertTrue(h.isHeld(), () -> "lost: " + h.lost().getNow(null));
        assertEquals(h.owner(), locks.info(k).orElseThrow().owner());
        h.release();
        assertTrue(locks.info(k).isEmpty());
    }

    @Test
    protected void closeEndsTheWaitsAndObserversUnderWay() throws Exception {
        Hold h = locks.acquire(k, ttl(10_000));
        Relock other = open(srv);
        Future<Hold> waiter = pool.submit(() -> other.acquire(k, ttl(10_000).waitForever()));
        List<Observation> seen = new CopyOnWriteArrayList<>();
        other.observe(k + ":e", seen::add);
        eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 1 && !seen.isEmpty()
            && String.valueOf(srv.cmd("CLIENT", "LIST")).toLowerCase().contains("cmd=lock.observe"));
        long t0 = System.nanoTime();
        other.close();
        ExecutionException e = assertThrows(ExecutionException.class, () -> waiter.get(30, TimeUnit.SECONDS));
        assertInstanceOf(NotAcquiredException.class, e.getCause());
        assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 3000);
        eventually(ofSeconds(20), () -> locks.waiters(k, 0).isEmpty());
        eventually(ofSeconds(20), () -> !String.valueOf(srv.cmd("CLIENT", "LIST")).toLowerCase().contains("cmd=lock.observe"));
        h.release();
    }

    @Test
    protected void closeReleasesWhatIsHeld() {
        Relock other = open(srv);
        Hold h = other.acquire(k, ttl(10_000));
        other.close();
        assertThrows(LockLostException.class, h::check);
        assertTrue(locks.info(k).isEmpty());
    }
}
