package dev.relock.testing;

import static dev.relock.testing.BehaviourCases.eventually;
import static dev.relock.testing.BehaviourCases.ttl;
import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.Info;
import dev.relock.Leadership;
import dev.relock.NotAcquiredException;
import dev.relock.Relock;
import dev.relock.RelockAsync;
import dev.relock.RelockLock;
import dev.relock.Waiter;
import java.lang.reflect.Field;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
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
import org.junit.jupiter.api.TestInstance;

/**
 * Attacks on the in-thread wait (Relock.blockingHere): a platform thread's wait on one server
 * runs on that thread, and interrupts reach it only through InterruptWatch's timer task. Each
 * adapter's test class extends it with how to reach a server (Jedis's and Lettuce's do). Every
 * wait is bounded by events with generous limits; nothing asserts speed, except that a give-back
 * comes well before the hold's ttl (60 s or more) would have ended it.
 *
 * <p>Every client a test makes ({@link #client()}) is closed after it and every {@link Acquirer}
 * it started is interrupted and joined, pass or fail: a test that failed half-way used to leave
 * its waiting threads (64 or 100, waiting without end) and their client behind, and every later
 * test of the class failed with it (staged: 8 of 11). In a fresh make test with a core busy
 * (2026-12-04, load 30 to 50) one read missed its bound that way, and the Lettuce classes run
 * after it in the same JVM failed too, on connects that missed 1 s while those threads ran.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
public abstract class InThreadWaitCases<S extends RedisServer> {
    protected S srv;
    /** the test's own Relock for holding keys and reading the queue (sequential calls only). */
    protected Relock admin;
    protected String k;
    /** The clients the current test made: closed after it (closing one twice does nothing more). */
    private final List<Relock> opened = new CopyOnWriteArrayList<>();
    /** The Acquirers running: interrupted and joined after each test. */
    private static final Set<Acquirer> LIVE = ConcurrentHashMap.newKeySet();

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
        admin = open(srv);
        k = "attack:" + info.getTestMethod().get().getName();
    }

    @AfterEach
    protected void close() throws Exception {
        // Closing a client cuts its waits; the interrupt ends an Acquirer whatever it runs.
        for (Relock r : opened) {
            r.close();
        }
        opened.clear();
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        for (Acquirer a : LIVE) {
            a.interrupt();
        }
        for (Acquirer a : LIVE) {
            a.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(until - System.nanoTime())));
        }
        List<String> left = new ArrayList<>();
        for (Acquirer a : LIVE) {
            if (a.isAlive()) {
                left.add(a.getName());
            }
        }
        LIVE.clear();
        admin.close();
        Thread.interrupted();
        assertTrue(left.isEmpty(), "threads still running 30 s after the test: " + left);
    }

    protected Relock client() {
        Relock r = open(srv);
        opened.add(r);
        return r;
    }

    // --- helpers -------------------------------------------------------------------------

    protected static Object watchField(String name) {
        try {
            Class<?> c = Class.forName("dev.relock.InterruptWatch");
            Field f = c.getDeclaredField(name);
            f.setAccessible(true);
            return f.get(null);
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
    }

    protected static int watched() {
        return ((Map<?, ?>) watchField("WATCHED")).size();
    }

    protected static boolean watchTaskScheduled() {
        synchronized (classOf()) {
            return watchField("task") != null;
        }
    }

    protected static Class<?> classOf() {
        try {
            return Class.forName("dev.relock.InterruptWatch");
        } catch (ClassNotFoundException e) {
            throw new AssertionError(e);
        }
    }

    /** The watch stopped: nothing watched and its timer task cancelled. */
    protected static void watchIsIdle() throws InterruptedException {
        eventually(ofSeconds(20), () -> watched() == 0);
        eventually(ofSeconds(20), () -> !watchTaskScheduled());
        assertEquals(0, watched(), "a watch entry was left");
    }

    protected int clients() {
        String list = String.valueOf(srv.cmd("CLIENT", "LIST"));
        int n = 0;
        for (String line : list.split("\n")) {
            if (!line.isBlank()) {
                n++;
            }
        }
        return n;
    }

    protected int waiters() {
        return probe(() -> admin.waiters(k, 0).size());
    }

    protected Optional<Info> info() {
        return probe(() -> admin.info(k));
    }

    /**
     * One of the test's own reads (not what is tested), asked again for up to 20 s while the
     * server does not answer in time: at a load of 30 to 50 the admin's 1 s bound was missed,
     * and the read's failure, not the attack, failed the test.
     */
    protected static <T> T probe(java.util.function.Supplier<T> read) {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (true) {
            try {
                return read.get();
            } catch (dev.relock.RelockException e) {
                if (!e.retryable() || System.nanoTime() - until > 0) {
                    throw e;
                }
            }
            // A pause before the next try: a read that failed at once (a refused connect) must
            // not spin against a server that is already behind.
            java.util.concurrent.locks.LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(10));
        }
    }

    /** A platform thread that runs acquire and keeps what came out and its interrupt status. */
    protected static final class Acquirer extends Thread {
        public final AtomicReference<Object> result = new AtomicReference<>();
        public volatile boolean flagAfter;
        private final java.util.function.Supplier<Object> call;

        public Acquirer(String name, java.util.function.Supplier<Object> call) {
            super(name);
            this.call = call;
            setDaemon(true);
        }

        @Override
        public synchronized void start() {
            LIVE.add(this);
            super.start();
        }

        @Override
        public void run() {
            try {
                result.set(call.get());
            } catch (Throwable e) {
                result.set(e);
            }
            flagAfter = Thread.currentThread().isInterrupted();
            LIVE.remove(this);
        }
    }

    protected static void spinMicros(long us) {
        long until = System.nanoTime() + us * 1000;
        while (System.nanoTime() < until) {
            Thread.onSpinWait();
        }
    }

    // --- attacks ---------------------------------------------------------------------------

    /**
     * An interrupt landing as the grant arrives (before, at, and after the release that grants
     * it, spread over the watch's 10 ms period): either the waiter holds it and is the one
     * owner, or it is not acquired (interrupt kept) and its grant, if any, is given back
     * promptly (long before the 60 s ttl).
     */
    @Test
    protected void anInterruptRacingTheGrantLeavesOneOwnerAndNoOrphan() throws Exception {
        int granted = 0;
        int refused = 0;
        try (Relock waiterSide = client()) {
            for (int i = 0; i < 60; i++) {
                Hold h = admin.acquire(k, ttl(60_000));
                Acquirer w = new Acquirer("race-" + i, () -> waiterSide.acquire(k, ttl(60_000).waitForever()));
                w.start();
                eventually(ofSeconds(20), () -> waiters() == 1);
                long gap = (i * 397L) % 15_000; // 0..15 ms, across the poll period
                switch (i % 3) {
                    case 0 -> {
                        w.interrupt();
                        spinMicros(gap);
                        h.release();
                    }
                    case 1 -> {
                        h.release();
                        spinMicros(gap / 10);
                        w.interrupt();
                    }
                    default -> {
                        Thread r = new Thread(h::release);
                        r.start();
                        w.interrupt();
                        r.join(20_000);
                    }
                }
                w.join(30_000);
                assertFalse(w.isAlive(), "round " + i + ": the interrupted waiter ended");
                Object r = w.result.get();
                if (r instanceof Hold got) {
                    granted++;
                    Info now = info().orElseThrow(() -> new AssertionError("a hold reported granted is not on the server"));
                    assertEquals(got.owner(), now.owner(), "the granted waiter is the one owner");
                    assertEquals(1, admin.holders(k, 0).size());
                    got.release();
                } else {
                    refused++;
                    assertInstanceOf(NotAcquiredException.class, r, "round " + i);
                    assertTrue(w.flagAfter, "round " + i + ": the interrupt is kept");
                }
                int round = i;
                // A grant that landed while the wait was cut must be given back now, not at its ttl.
                eventually(ofSeconds(15), () -> info().isEmpty());
                assertTrue(info().isEmpty(), "round " + round + ": the key is free again");
                assertEquals(0, waiters(), "round " + round + ": no waiter left");
            }
        }
        System.out.println("grant/interrupt race: granted " + granted + ", not acquired " + refused);
        watchIsIdle();
    }

    /** Many platform threads waiting, all interrupted: every wait is cut, then the watch stops. */
    @Test
    protected void hundredsOfInterruptedWaitersAreAllCutAndTheWatchStops() throws Exception {
        Hold h = admin.acquire(k, ttl(300_000));
        waiters();
        int baseline = clients();
        int n = 64; // many at once, and few enough for a suite on a loaded 2-core machine
        Relock waiterSide = client();
        List<Acquirer> ws = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Acquirer w = new Acquirer("many-" + i, () -> waiterSide.acquire(k, ttl(60_000).waitForever()));
            ws.add(w);
            w.start();
        }
        eventually(ofSeconds(60), () -> waiters() == n);
        assertEquals(n, watched(), "each waiting thread is watched");
        for (Acquirer w : ws) {
            w.interrupt();
        }
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        for (Acquirer w : ws) {
            w.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(until - System.nanoTime())));
            assertFalse(w.isAlive(), w.getName() + " still waits after its interrupt");
            assertInstanceOf(NotAcquiredException.class, w.result.get(), w.getName());
            assertTrue(w.flagAfter, w.getName() + " kept its interrupt");
        }
        eventually(ofSeconds(20), () -> waiters() == 0);
        assertEquals(h.owner(), info().orElseThrow().owner(), "the holder still holds it");
        watchIsIdle();
        waiterSide.close();
        eventually(ofSeconds(20), () -> clients() <= baseline);
        assertEquals(baseline, clients(), "relock's connections are all closed");
        h.release();
    }

    /** close() from another thread while many platform threads wait. */
    @Test
    protected void closeFromAnotherThreadEndsEveryPlatformWait() throws Exception {
        Hold h = admin.acquire(k, ttl(300_000));
        waiters();
        int baseline = clients();
        int n = 100;
        Relock waiterSide = client();
        List<Acquirer> ws = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Acquirer w = new Acquirer("closed-" + i, () -> waiterSide.acquire(k, ttl(60_000).waitForever()));
            ws.add(w);
            w.start();
        }
        eventually(ofSeconds(60), () -> waiters() == n);
        Thread closer = new Thread(waiterSide::close);
        closer.start();
        closer.join(60_000);
        assertFalse(closer.isAlive(), "close() returned");
        for (Acquirer w : ws) {
            w.join(30_000);
            assertFalse(w.isAlive(), w.getName() + " still waits after close()");
            assertInstanceOf(NotAcquiredException.class, w.result.get(), w.getName());
            assertFalse(w.flagAfter, "no interrupt appeared");
        }
        eventually(ofSeconds(20), () -> waiters() == 0);
        assertEquals(h.owner(), info().orElseThrow().owner());
        assertEquals(1, admin.holders(k, 0).size());
        watchIsIdle();
        eventually(ofSeconds(20), () -> clients() <= baseline);
        assertEquals(baseline, clients());
        h.release();
    }

    /**
     * close() while the holder's release races it: a wait granted as close() cuts it is given
     * back (by close or the acquisition itself), never left to its ttl.
     */
    @Test
    protected void closeRacingTheGrantLeavesNoOrphan() throws Exception {
        for (int i = 0; i < 20; i++) {
            Hold h = admin.acquire(k, ttl(60_000));
            Relock waiterSide = client();
            Acquirer w = new Acquirer("close-race-" + i, () -> waiterSide.acquire(k, ttl(60_000).waitForever()));
            w.start();
            eventually(ofSeconds(20), () -> waiters() == 1);
            Thread r = new Thread(h::release);
            r.start();
            spinMicros((i * 613L) % 3000);
            waiterSide.close();
            r.join(20_000);
            w.join(30_000);
            assertFalse(w.isAlive());
            Object res = w.result.get();
            if (res instanceof Hold got) {
                // close() came after the acquisition returned: close released it.
                assertFalse(got.isHeld());
            }
            int round = i;
            eventually(ofSeconds(15), () -> info().isEmpty());
            assertTrue(info().isEmpty(), "round " + round + ": no orphan grant after close()");
        }
        watchIsIdle();
    }

    /** RelockLock.lock() is uninterruptible: it keeps waiting under repeated interrupts and keeps the flag. */
    @Test
    protected void lockKeepsWaitingUnderRepeatedInterruptsAndKeepsTheFlag() throws Exception {
        try (Relock waiterSide = client()) {
            Hold h = admin.acquire(k, ttl(60_000));
            RelockLock l = waiterSide.lock(k, Duration.ofSeconds(60));
            AtomicBoolean locked = new AtomicBoolean();
            AtomicReference<String> ownerSeen = new AtomicReference<>();
            CountDownLatch unlock = new CountDownLatch(1);
            Acquirer t = new Acquirer("uninterruptible", () -> {
                l.lock();
                boolean flag = Thread.interrupted();
                locked.set(true);
                ownerSeen.set(l.hold().owner());
                // The interrupter may land one more interrupt between its look at locked and
                // its stop (a flake of this test, seen once): not lock()'s, so not counted.
                while (true) {
                    try {
                        if (!unlock.await(60, TimeUnit.SECONDS)) {
                            throw new AssertionError("never told to unlock");
                        }
                        break;
                    } catch (InterruptedException e) {
                        // the interrupter's late one
                    }
                }
                l.unlock();
                return flag;
            });
            t.start();
            eventually(ofSeconds(20), () -> waiters() == 1);
            for (int i = 0; i < 20; i++) {
                t.interrupt();
                Thread.sleep(25);
                assertFalse(locked.get(), "lock() returned while the key was held by another");
                assertEquals(h.owner(), info().orElseThrow().owner());
                assertEquals(1, admin.holders(k, 0).size(), "no cut wait was granted");
            }
            eventually(ofSeconds(20), () -> waiters() == 1);
            // Now interrupts keep coming while the holder lets go.
            AtomicBoolean stop = new AtomicBoolean();
            Thread interrupter = new Thread(() -> {
                while (!stop.get() && !locked.get()) {
                    t.interrupt();
                    LockSupport.parkNanos(ThreadLocalRandom.current().nextLong(200_000, 4_000_000));
                }
            });
            interrupter.start();
            Thread.sleep(30);
            h.release();
            eventually(ofSeconds(30), locked::get);
            stop.set(true);
            interrupter.join(20_000);
            assertEquals(ownerSeen.get(), info().orElseThrow().owner(), "the lock's hold is the one owner");
            assertEquals(1, admin.holders(k, 0).size());
            unlock.countDown();
            t.join(30_000);
            assertFalse(t.isAlive());
            assertEquals(Boolean.TRUE, t.result.get(), "lock() kept the interrupt: " + t.result.get());
            eventually(ofSeconds(15), () -> info().isEmpty());
            assertEquals(0, waiters());
        }
        watchIsIdle();
    }

    /** lockInterruptibly and tryLock(time): interrupted or timed out, each leaves the queue. */
    @Test
    protected void lockInterruptiblyAndTimedTryLockLeaveTheQueue() throws Exception {
        try (Relock waiterSide = client()) {
            Hold h = admin.acquire(k, ttl(60_000));
            RelockLock l = waiterSide.lock(k, Duration.ofSeconds(60));

            Acquirer a = new Acquirer("interruptibly", () -> {
                try {
                    l.lockInterruptibly();
                    return "locked";
                } catch (InterruptedException e) {
                    return e;
                }
            });
            a.start();
            eventually(ofSeconds(20), () -> waiters() == 1);
            a.interrupt();
            a.join(30_000);
            assertFalse(a.isAlive());
            assertInstanceOf(InterruptedException.class, a.result.get());
            eventually(ofSeconds(20), () -> waiters() == 0);

            Acquirer b = new Acquirer("timed", () -> {
                try {
                    return l.tryLock(300, TimeUnit.MILLISECONDS);
                } catch (InterruptedException e) {
                    return e;
                }
            });
            b.start();
            b.join(30_000);
            assertEquals(Boolean.FALSE, b.result.get());
            eventually(ofSeconds(20), () -> waiters() == 0);

            Acquirer c = new Acquirer("timed-interrupted", () -> {
                try {
                    return l.tryLock(60, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    return e;
                }
            });
            c.start();
            eventually(ofSeconds(20), () -> waiters() == 1);
            c.interrupt();
            c.join(30_000);
            assertFalse(c.isAlive());
            assertInstanceOf(InterruptedException.class, c.result.get());
            eventually(ofSeconds(20), () -> waiters() == 0);
            assertEquals(h.owner(), info().orElseThrow().owner());
            h.release();
        }
        watchIsIdle();
    }

    /**
     * RelockAsync futures cancelled with cancel(true), some racing the grant; then the same
     * executor's threads (reused) wait again: a stale interrupt or watch entry must not cut them.
     */
    @Test
    protected void cancelledAsyncWaitsLeaveNothingAndReusedThreadsWaitUndisturbed() throws Exception {
        ExecutorService ex = Executors.newFixedThreadPool(4);
        try (Relock waiterSide = client(); RelockAsync async = RelockAsync.of(waiterSide, ex)) {
            Hold h = admin.acquire(k, ttl(60_000));
            List<CompletableFuture<Hold>> fs = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                fs.add(async.acquireAsync(k, ttl(60_000).waitForever()));
            }
            eventually(ofSeconds(20), () -> waiters() == 4);
            for (CompletableFuture<Hold> f : fs) {
                assertTrue(f.cancel(true));
            }
            eventually(ofSeconds(20), () -> waiters() == 0);
            assertEquals(h.owner(), info().orElseThrow().owner());
            watchIsIdle();

            // The same four threads wait again: none may be cut by what came before.
            List<CompletableFuture<Hold>> again = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                again.add(async.acquireAsync(k, ttl(60_000).waitForever()));
            }
            eventually(ofSeconds(20), () -> waiters() == 4);
            Thread.sleep(300); // several watch periods
            assertEquals(4, waiters(), "a reused thread's wait was cut");
            for (CompletableFuture<Hold> f : again) {
                assertFalse(f.isDone(), "a reused thread's wait ended: " + f);
            }
            h.release();
            // Granted in queue order, one at a time: each is released once seen.
            List<CompletableFuture<Hold>> left = new ArrayList<>(again);
            while (!left.isEmpty()) {
                CompletableFuture.anyOf(left.toArray(new CompletableFuture<?>[0])).get(30, TimeUnit.SECONDS);
                for (CompletableFuture<Hold> f : new ArrayList<>(left)) {
                    if (f.isDone()) {
                        Hold got = f.get();
                        assertEquals(got.owner(), info().orElseThrow().owner());
                        got.release();
                        left.remove(f);
                    }
                }
            }
            assertTrue(info().isEmpty());

            // cancel(true) racing the grant: never an orphan left to its ttl.
            for (int i = 0; i < 40; i++) {
                Hold hh = admin.acquire(k, ttl(60_000));
                CompletableFuture<Hold> f = async.acquireAsync(k, ttl(60_000).waitForever());
                eventually(ofSeconds(20), () -> waiters() == 1);
                if (i % 2 == 0) {
                    hh.release();
                    spinMicros((i * 211L) % 2000);
                    f.cancel(true);
                } else {
                    f.cancel(true);
                    spinMicros((i * 997L) % 12_000);
                    hh.release();
                }
                if (!f.isCancelled()) {
                    f.get(30, TimeUnit.SECONDS).release();
                }
                int round = i;
                eventually(ofSeconds(15), () -> info().isEmpty());
                assertTrue(info().isEmpty(), "round " + round + ": a cancelled future's grant was given back");
                eventually(ofSeconds(15), () -> waiters() == 0);
            }
        } finally {
            ex.shutdownNow();
        }
        watchIsIdle();
    }

    /**
     * The watch task stops when nothing is watched and restarts with the next wait: waits that
     * start exactly as others end (short bounded waits churning), each interrupted at a random
     * moment, must all be cut (a wait left unwatched by the stop/restart race would hang).
     */
    @Test
    protected void theWatchStopRestartRaceNeverLeavesAnInterruptedWaitUncut() throws Exception {
        Hold h = admin.acquire(k, ttl(300_000));
        try (Relock waiterSide = client(); Relock churnSide = client()) {
            AtomicBoolean stop = new AtomicBoolean();
            AtomicInteger churned = new AtomicInteger();
            List<Thread> churners = new ArrayList<>();
            for (int c = 0; c < 2; c++) {
                Thread t = new Thread(() -> {
                    while (!stop.get()) {
                        try {
                            churnSide.acquire(k, ttl(60_000).waitAtMost(Duration.ofMillis(ThreadLocalRandom.current().nextInt(1, 25))));
                        } catch (NotAcquiredException e) {
                            churned.incrementAndGet();
                        }
                    }
                });
                t.setDaemon(true);
                churners.add(t);
                t.start();
            }
            try {
                for (int i = 0; i < 150; i++) {
                    Acquirer w = new Acquirer("churn-" + i, () -> waiterSide.acquire(k, ttl(60_000).waitForever()));
                    w.start();
                    Thread.sleep(ThreadLocalRandom.current().nextInt(0, 25));
                    w.interrupt();
                    w.join(30_000);
                    assertFalse(w.isAlive(), "round " + i + ": an interrupted wait was never cut (watch lost?)");
                    assertInstanceOf(NotAcquiredException.class, w.result.get());
                }
            } finally {
                stop.set(true);
                for (Thread t : churners) {
                    t.join(30_000);
                }
            }
            assertTrue(churned.get() > 0);
        }
        eventually(ofSeconds(20), () -> waiters() == 0);
        assertEquals(h.owner(), info().orElseThrow().owner());
        h.release();
        watchIsIdle();
    }

    /**
     * A thread interrupted in one wait, whose flag is then cleared (a pool's worker, or a
     * caller that handled it), waits again: that innocent wait must not be cut.
     */
    @Test
    protected void aReusedThreadsLaterWaitIsNotCutByAnEarlierInterrupt() throws Exception {
        ExecutorService one = Executors.newSingleThreadExecutor();
        try (Relock waiterSide = client()) {
            Hold h = admin.acquire(k, ttl(60_000));
            Future<?> first = one.submit(() -> waiterSide.acquire(k, ttl(60_000).waitForever()));
            eventually(ofSeconds(20), () -> waiters() == 1);
            first.cancel(true); // FutureTask interrupts the worker
            eventually(ofSeconds(20), () -> waiters() == 0);
            Future<Hold> second = one.submit(() -> waiterSide.acquire(k, ttl(60_000).waitAtMost(ofSeconds(60))));
            eventually(ofSeconds(20), () -> waiters() == 1);
            Thread.sleep(300);
            assertFalse(second.isDone(), "the reused worker's wait ended early");
            assertEquals(1, waiters());

            // The same thread handles its interrupt itself and waits again.
            CountDownLatch cleared = new CountDownLatch(1);
            AtomicReference<Object> secondWait = new AtomicReference<>();
            Thread self = new Thread(() -> {
                try {
                    waiterSide.acquire(k, ttl(60_000).waitForever());
                    secondWait.set("granted too early");
                    return;
                } catch (NotAcquiredException e) {
                    Thread.interrupted();
                }
                cleared.countDown();
                try {
                    secondWait.set(waiterSide.acquire(k, ttl(60_000).waitForever()));
                } catch (Throwable e) {
                    secondWait.set(e);
                }
            });
            self.start();
            eventually(ofSeconds(20), () -> waiters() == 2);
            self.interrupt();
            assertTrue(cleared.await(30, TimeUnit.SECONDS));
            eventually(ofSeconds(20), () -> waiters() == 2);
            Thread.sleep(300);
            assertEquals(2, waiters(), "the thread's later wait was cut");
            assertEquals(null, secondWait.get());

            h.release();
            Hold s = second.get(30, TimeUnit.SECONDS);
            s.release();
            self.join(30_000);
            assertInstanceOf(Hold.class, secondWait.get(), String.valueOf(secondWait.get()));
            ((Hold) secondWait.get()).release();
            assertTrue(info().isEmpty());
        } finally {
            one.shutdownNow();
        }
        watchIsIdle();
    }

    /** A waiting thread whose connection is killed (CLIENT KILL) waits again and is granted later. */
    @Test
    protected void aWaitWhoseConnectionIsKilledWaitsAgainAndIsGranted() throws Exception {
        Hold h = admin.acquire(k, ttl(60_000));
        waiters();
        int baseline = clients();
        Relock waiterSide = client();
        Acquirer w = new Acquirer("killed", () -> waiterSide.acquire(k, ttl(60_000).waitForever()));
        w.start();
        eventually(ofSeconds(20), () -> waiters() == 1);
        for (int i = 0; i < 3; i++) {
            Waiter before = admin.waiters(k, 0).get(0);
            assertEquals(1L, srv.cmd("CLIENT", "KILL", "ID", before.client()));
            eventually(ofSeconds(20), () -> {
                List<Waiter> now = admin.waiters(k, 0);
                return now.size() == 1 && now.get(0).client() != before.client();
            });
            assertTrue(w.isAlive(), "the wait ended at a killed connection: " + w.result.get());
        }
        h.release();
        w.join(30_000);
        assertFalse(w.isAlive());
        Hold got = assertInstanceOf(Hold.class, w.result.get());
        assertEquals(got.owner(), info().orElseThrow().owner());
        assertEquals(1, admin.holders(k, 0).size());
        got.release();
        assertTrue(info().isEmpty());
        waiterSide.close();
        eventually(ofSeconds(20), () -> clients() <= baseline);
        assertEquals(baseline, clients());
        watchIsIdle();
    }

    /** A campaign waiting on a platform thread leaves the queue when interrupted; a semaphore's wait too. */
    @Test
    protected void anInterruptedCampaignAndSemaphoreWaitLeaveTheQueue() throws Exception {
        try (Relock waiterSide = client()) {
            Leadership leader = admin.campaign(k, "first");
            Acquirer c = new Acquirer("campaign", () -> waiterSide.campaign(k, "second"));
            c.start();
            eventually(ofSeconds(20), () -> waiters() == 1);
            c.interrupt();
            c.join(30_000);
            assertFalse(c.isAlive());
            assertInstanceOf(NotAcquiredException.class, c.result.get());
            assertTrue(c.flagAfter);
            eventually(ofSeconds(20), () -> waiters() == 0);
            assertEquals("first", admin.leader(k).orElseThrow().value());
            leader.resign();

            String sem = k + ":sem";
            Hold p = admin.acquire(sem, ttl(60_000).limit(1));
            Acquirer s = new Acquirer("semaphore", () -> waiterSide.acquire(sem, ttl(60_000).limit(1).waitForever()));
            s.start();
            eventually(ofSeconds(20), () -> admin.waiters(sem, 0).size() == 1);
            s.interrupt();
            s.join(30_000);
            assertFalse(s.isAlive());
            assertInstanceOf(NotAcquiredException.class, s.result.get());
            eventually(ofSeconds(20), () -> admin.waiters(sem, 0).isEmpty());
            p.release();
        }
        watchIsIdle();
    }
}
