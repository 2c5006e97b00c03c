package dev.relock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.junit.jupiter.api.Test;

/** The core's rules on scripted transports: no Redis, every command recorded. */
class FakeTransportTest {

    /** A transport whose replies a function decides; every command it was sent, in order. */
    static final class Fake implements Transport {
        final String name;
        final Function<Object[], Object> reply;
        final List<List<Object>> sent = Collections.synchronizedList(new ArrayList<>());
        /** once closed, nothing is sent: every call fails as a closed connection does. */
        volatile boolean closed;
        /** run when relock cuts a dedicated connection (Connection.abort). */
        volatile Runnable onAbort = () -> {};

        Fake(String name, Function<Object[], Object> reply) {
            this.name = name;
            this.reply = reply;
        }

        List<List<Object>> sentOf(String command) {
            synchronized (sent) {
                return sent.stream().filter(c -> c.get(0).equals(command)).toList();
            }
        }

        Object answer(Object[] args) {
            if (closed) {
                throw new TransportException("the connection is closed", false, false, null);
            }
            sent.add(List.of(args));
            Object r = reply.apply(args);
            if (r instanceof RuntimeException e) {
                throw e;
            }
            return r;
        }

        @Override
        public String name() {
            return name;
        }

        @Override
        public boolean isCluster() {
            return false;
        }

        @Override
        public Object call(String key, Duration timeout, Object... args) {
            return answer(args);
        }

        @Override
        public Object callOnce(String key, Duration timeout, Object... args) {
            return answer(args);
        }

        @Override
        public List<Object> callEachMaster(Duration timeout, Object... args) {
            return List.of(answer(args));
        }

        @Override
        public Connection dedicated(String key) {
            return new Connection() {
                @Override
                public String address() {
                    return name;
                }

                @Override
                public Object call(Duration bound, Object... args) {
                    return answer(args);
                }

                @Override
                public List<Object> pipeline(Duration bound, List<Object[]> commands) {
                    List<Object> out = new ArrayList<>();
                    for (Object[] c : commands) {
                        try {
                            out.add(answer(c));
                        } catch (ReplyError e) {
                            out.add(e);
                        }
                    }
                    return out;
                }

                @Override
                public void abort() {
                    onAbort.run();
                }

                @Override
                public void close() {}
            };
        }

        @Override
        public void close() {
            closed = true;
        }
    }

    static TransportException lost() {
        return new TransportException("read timed out", true, true, null);
    }

    static Object grants(Object[] a) {
        return switch (String.valueOf(a[0])) {
            case "LOCK.ACQUIRE", "LOCK.WAIT" -> 7L;
            case "LOCK.RELEASE" -> 0L;
            case "LOCK.RENEW" -> 1L;
            default -> null;
        };
    }

    @Test
    void aFencedWriteIsSentOnceWhateverHappens() {
        Fake f = new Fake("s", a -> a[0].equals("LOCK.FENCED") ? lost() : grants(a));
        try (Relock locks = Relock.create(f)) {
            Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(10)));
            RelockException e = assertThrows(RelockException.class, () -> h.fenced("INCR", "n"));
            assertEquals(RelockException.Kind.MAY_HAVE_RUN, e.kind());
            assertEquals(1, f.sentOf("LOCK.FENCED").size());
            assertEquals(List.of("LOCK.FENCED", "k", 7L, "INCR", "n"), f.sentOf("LOCK.FENCED").get(0));
            h.release();
        }
        Fake stale = new Fake("s", a -> a[0].equals("LOCK.FENCED") ? new ReplyError("FENCED stale token 7, current none") : grants(a));
        try (Relock locks = Relock.create(stale)) {
            Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(10)));
            assertEquals(RelockException.Kind.FENCED, assertThrows(RelockException.class, () -> h.fenced("INCR", "n")).kind());
            assertEquals(1, stale.sentOf("LOCK.FENCED").size());
        }
    }

    /**
     * A renewal the servers applied, answered after the hold was lost (its validity ran out and
     * the give-back is under way), answered as a success and moved the validity on: the Go
     * client's Mutex.Extend did that in the attack round of 2026-12-05, and renewOnce had the
     * same step. Here the loss lands while LOCK.RENEW is being answered.
     */
    @Test
    void aRenewalAnsweredAfterTheLossDoesNotReviveTheHold() {
        java.util.concurrent.atomic.AtomicReference<Hold> held = new java.util.concurrent.atomic.AtomicReference<>();
        Fake f = new Fake("s", a -> {
            if (a[0].equals("LOCK.RENEW") && held.get() != null) {
                held.get().lose("lost while the renewal ran (the test's)", null);
            }
            return grants(a);
        });
        try (Relock locks = Relock.create(f)) {
            Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(30)));
            held.set(h);
            LockLostException e = assertThrows(LockLostException.class, h::renew);
            assertTrue(e.getMessage().contains("lost while the renewal ran"), e.getMessage());
            assertThrows(LockLostException.class, h::check);
        }
    }

    /**
     * A section's exit whose reply was lost is given back in the background, and sent once more
     * 100 ms after it was answered (LOCK.RELEASE ... FROM 2). A section entered at once asked
     * FROM 1 too (count 2 again), so that repeat took the new section's count back and a
     * section nested in it was refused (the Go client's attack round of 2026-12-05). The fake
     * keeps the hold count as the module does (FROM c: applied at c, a repeat at c - 1).
     */
    /** A server's hold count as the module keeps it: FROM c applies at c, a repeat at c - 1. */
    static final class Counting implements Function<Object[], Object> {
        long count;
        /** the next exit (LOCK.RELEASE FROM 2) is applied and its reply lost. */
        boolean loseNextExit;
        /** while not null, every LOCK.RELEASE after a lost exit waits for it (a server that stalls). */
        volatile CountDownLatch stall;

        @Override
        public Object apply(Object[] a) {
            CountDownLatch st = stall;
            if (st != null && "LOCK.RELEASE".equals(a[0]) && !loseNextExit) {
                try {
                    st.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return step(a);
        }

        private synchronized Object step(Object[] a) {
            String cmd = String.valueOf(a[0]);
            long from = a.length > 4 && "FROM".equals(a[a.length - 2]) ? ((Number) a[a.length - 1]).longValue() : 1;
            switch (cmd) {
                case "LOCK.ACQUIRE", "LOCK.WAIT":
                    count = 1;
                    return 7L;
                case "LOCK.RENEW":
                    return 1L;
                case "LOCK.REENTER":
                    if (count != from) {
                        return new ReplyError("ERR hold count is " + count + ", not " + from);
                    }
                    return ++count;
                case "LOCK.RELEASE":
                    if (count == from) {
                        count--;
                        if (from == 2 && loseNextExit) {
                            loseNextExit = false;
                            return lost(); // applied, its reply lost
                        }
                        return count;
                    }
                    if (count == from - 1) {
                        return count; // a repeat: changes nothing
                    }
                    return new ReplyError("ERR hold count is " + count + ", not " + from);
                default:
                    return null;
            }
        }

        synchronized long count() {
            return count;
        }
    }

    @Test
    void aLateExitsRepeatNeverTakesTheNextSectionsCount() throws Exception {
        Counting server = new Counting();
        Fake f = new Fake("s", server);
        try (Relock locks = Relock.create(f)) {
            java.util.concurrent.locks.Lock lock = locks.lock("k");
            lock.lock();
            lock.lock();
            synchronized (server) {
                server.loseNextExit = true;
            }
            lock.unlock(); // the exit: applied, its reply lost, given back in the background
            synchronized (server) {
                assertFalse(server.loseNextExit, "the exit went by without losing its reply");
            }
            long inside;
            long later;
            lock.lock(); // the next section, at once
            try {
                inside = server.count();
                Thread.sleep(300); // marked: past the late exit's repeat, had it not been waited for
                later = server.count();
                lock.lock(); // nested
                lock.unlock();
            } finally {
                lock.unlock();
            }
            assertEquals(List.of(2L, 2L, 1L), List.of(inside, later, server.count()), "the count entering, 300 ms later, after");
            lock.unlock();
            assertEquals(0L, server.count());
        }
    }

    /**
     * tryLock() does not wait: a nested tryLock() while a section's exit is still being given
     * back to a server that stalls throws NotAcquiredException at once (retryable, the hold
     * kept) instead of waiting for the give-back (the attack on the late-step rule measured
     * 8 s); lock() waits for it and enters.
     */
    @Test
    void aNestedTryLockDoesNotWaitForALateStep() throws Exception {
        Counting server = new Counting();
        Fake f = new Fake("s", server);
        try (Relock locks = Relock.create(f)) {
            RelockLock lock = locks.lock("k");
            lock.lock();
            lock.lock();
            CountDownLatch stall = new CountDownLatch(1);
            synchronized (server) {
                server.loseNextExit = true;
            }
            server.stall = stall;
            lock.unlock(); // applied, its reply lost; the give-back stalls
            long t0 = System.nanoTime();
            NotAcquiredException e = assertThrows(NotAcquiredException.class, lock::tryLock);
            assertTrue(e.retryable(), e.getMessage());
            assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 5000, "tryLock() waited for the give-back");
            assertEquals(1, lock.getHoldCount());
            server.stall = null;
            stall.countDown();
            lock.lock();
            assertEquals(2, server.count());
            lock.unlock();
            lock.unlock();
            assertEquals(0L, server.count());
        }
    }

    /**
     * Redlock over three masters, one down: every section's steps go unanswered there and are
     * given back in the background until the ttl. An entry that waited for those give-backs to
     * end waited the ttl out (15 s for ttl 5 s: the attack on the late-step rule, 2026-12-05);
     * one master down is what Redlock is for. Three sections, each with a nested one, take far
     * less than one ttl, with the count right on the two live masters.
     */
    @Test
    void aRedlockMasterThatIsDownDoesNotHoldUpEachSection() throws Exception {
        Counting a = new Counting();
        Counting b = new Counting();
        Fake down = new Fake("c", x -> lost());
        try (Relock locks = Relock.redlock(List.of(new Fake("a", a), new Fake("b", b), down))) {
            java.util.concurrent.locks.Lock lock = locks.lock("k", Duration.ofSeconds(5));
            lock.lock();
            long t0 = System.nanoTime();
            List<Long> seen = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                lock.lock();
                lock.lock();
                seen.add(a.count());
                seen.add(b.count());
                lock.unlock();
                lock.unlock();
            }
            long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertEquals(List.of(3L, 3L, 3L, 3L, 3L, 3L), seen, "the live masters' counts inside the nested sections");
            assertTrue(tookMs < 5000, "three sections took " + tookMs + " ms with one master down (ttl 5 s)");
            lock.unlock();
            assertEquals(List.of(0L, 0L), List.of(a.count(), b.count()));
        }
    }

    /**
     * LOCK.FORCERELEASE run again after its reply was lost removes a hold taken since: sent
     * once, and its lost reply is MAY_HAVE_RUN, not retryable (it was a retryable SERVER
     * error: a caller retrying did just that).
     */
    @Test
    void aForceReleaseWhoseReplyIsLostMayHaveRunAndIsNotRetryable() {
        Fake f = new Fake("s", a -> a[0].equals("LOCK.FORCERELEASE") ? lost() : grants(a));
        try (Relock locks = Relock.create(f)) {
            RelockException e = assertThrows(RelockException.class, () -> locks.forceRelease("k"));
            assertEquals(RelockException.Kind.MAY_HAVE_RUN, e.kind(), e.getMessage());
            assertFalse(e.retryable(), e.getMessage());
            assertEquals(1, f.sentOf("LOCK.FORCERELEASE").size());
        }
    }

    @Test
    void aRetryAfterAFailedAcquisitionAsksUnderANewOwner() throws Exception {
        // The first two tries lose their replies (the first one's wait is not asked under its
        // owner: a lost reply is neither a refusal nor an answered undo): either may have
        // granted, so the first owner's grant is given back in the background, and the retry
        // asks as another owner (a late give-back never meets the same owner's next grant).
        int[] tries = {0};
        Fake f = new Fake("s", a -> (a[0].equals("LOCK.ACQUIRE") || a[0].equals("LOCK.WAIT")) && tries[0]++ < 2 ? lost() : grants(a));
        try (Relock locks = Relock.create(f, Relock.Settings.defaults().retryDelay(Duration.ofMillis(10)))) {
            Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(10)).waitAtMost(Duration.ofSeconds(5)));
            Object first = f.sentOf("LOCK.ACQUIRE").get(0).get(2);
            assertNotEquals(first, h.owner());
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            List<Object> back = List.of("LOCK.RELEASE", "k", first, "FROM", 1);
            while (!f.sentOf("LOCK.RELEASE").contains(back) && System.nanoTime() < until) {
                Thread.sleep(10);
            }
            assertTrue(f.sentOf("LOCK.RELEASE").contains(back), "the first owner given back: " + f.sentOf("LOCK.RELEASE"));
            Thread.sleep(300); // marked: the give-back's repeat (100 ms later) has landed
            assertTrue(f.sentOf("LOCK.RELEASE").stream().noneMatch(c -> c.get(2).equals(h.owner())), "the new grant is never given back");
            h.release();
        }
    }

    @Test
    void aRedlockRoundReturnsAtTheQuorumWithoutTheSlowMaster() throws Exception {
        CountDownLatch never = new CountDownLatch(1);
        Fake slow = new Fake("c", a -> {
            try {
                never.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return lost();
        });
        Fake a = new Fake("a", FakeTransportTest::grants);
        Fake b = new Fake("b", FakeTransportTest::grants);
        try (Relock locks = Relock.redlock(List.of(a, b, slow))) {
            long t0 = System.nanoTime();
            Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(10)));
            assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 5000);
            assertEquals(2, h.tokens().size());
            never.countDown();
            h.release();
        }
    }

    @Test
    void aReleaseNoQuorumAnsweredIsGivenBackInTheBackground() throws Exception {
        int[] releases = {0};
        Fake f = new Fake("s", a -> a[0].equals("LOCK.RELEASE") && releases[0]++ < 2 ? lost() : grants(a));
        try (Relock locks = Relock.create(f)) {
            Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(10)));
            RelockException e = assertThrows(RelockException.class, h::release);
            assertEquals(RelockException.Kind.NO_QUORUM, e.kind());
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (f.sentOf("LOCK.RELEASE").size() < 3 && System.nanoTime() < until) {
                Thread.sleep(10);
            }
            for (List<Object> c : f.sentOf("LOCK.RELEASE")) {
                assertEquals(List.of("LOCK.RELEASE", "k", h.owner(), "FROM", 1), c, "every repeat names its step");
            }
            assertTrue(f.sentOf("LOCK.RELEASE").size() >= 3, "repeated in the background until answered");
        }
    }

    @Test
    void aGrantNotAcknowledgedIsUndoneAndNeverGivenBackAfterTheNextGrant() throws Exception {
        int[] waits = {0};
        Fake f = new Fake("s", a -> a[0].equals("WAIT") ? (Object) (long) (waits[0]++ == 0 ? 0 : 1) : grants(a));
        try (Relock locks = Relock.create(f, Relock.Settings.defaults().retryDelay(Duration.ofMillis(10))
                .replicaAcks(1, Duration.ofMillis(50)))) {
            Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(10)).waitAtMost(Duration.ofSeconds(5)));
            Object first = f.sentOf("LOCK.ACQUIRE").get(0).get(2);
            List<List<Object>> sent;
            Thread.sleep(300); // marked: any give-back (and its repeat 100 ms later) has landed
            synchronized (f.sent) {
                sent = new ArrayList<>(f.sent);
            }
            int undo = sent.indexOf(List.of("LOCK.RELEASE", "k", first, "FROM", 1));
            assertTrue(undo > 0, "the grant not acknowledged undone: " + sent);
            int granted = -1;
            for (int i = 0; i < sent.size(); i++) {
                if (sent.get(i).get(0).equals("LOCK.WAIT") || (sent.get(i).get(0).equals("LOCK.ACQUIRE") && i > 0)) {
                    granted = i;
                }
            }
            assertTrue(granted > undo, "granted after the undo: " + sent);
            for (int i = granted; i < sent.size(); i++) {
                assertNotEquals("LOCK.RELEASE", sent.get(i).get(0), "nothing given back after the grant: " + sent);
            }
            assertTrue(h.isHeld());
            h.release();
        }
    }

    @Test
    void anUndoWhoseReplyIsLostIsFollowedByANewOwner() throws Exception {
        // ACQUIRE grants, WAIT answers 0, the undo's reply is lost (it may still run late): the
        // wait must not ask under the same owner, whose late undo could release its grant.
        int[] waits = {0};
        int[] releases = {0};
        Fake f = new Fake("s", a -> switch (String.valueOf(a[0])) {
            case "WAIT" -> (Object) (long) (waits[0]++ == 0 ? 0 : 1);
            case "LOCK.RELEASE" -> releases[0]++ == 0 ? lost() : grants(a);
            default -> grants(a);
        });
        try (Relock locks = Relock.create(f, Relock.Settings.defaults().retryDelay(Duration.ofMillis(10))
                .replicaAcks(1, Duration.ofMillis(50)))) {
            Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(10)).waitAtMost(Duration.ofSeconds(5)));
            Object first = f.sentOf("LOCK.ACQUIRE").get(0).get(2);
            assertNotEquals(first, h.owner(), "granted under the owner whose undo may still run");
            List<List<Object>> asked = new ArrayList<>(f.sentOf("LOCK.WAIT"));
            asked.addAll(f.sentOf("LOCK.ACQUIRE"));
            assertEquals(1, asked.stream().filter(c -> c.get(2).equals(first)).count(), "the first owner asked once: " + asked);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (f.sentOf("LOCK.RELEASE").size() < 2 && System.nanoTime() < until) {
                Thread.sleep(10);
            }
            assertEquals(List.of("LOCK.RELEASE", "k", first, "FROM", 1), f.sentOf("LOCK.RELEASE").get(1), "the first owner given back");
            assertTrue(h.isHeld());
            h.release();
        }
    }

    @Test
    void closeWaitsForAnAcquisitionUnderWayWhichGivesBackItsGrant() throws Exception {
        // LOCK.ACQUIRE is answered only once close() has begun: closing the connections at once
        // would leave that grant on the server until its ttl (nothing could give it back).
        CountDownLatch answer = new CountDownLatch(1);
        CountDownLatch asked = new CountDownLatch(1);
        Fake f = new Fake("s", a -> {
            if (a[0].equals("LOCK.ACQUIRE")) {
                asked.countDown();
                try {
                    answer.await(20, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return grants(a);
        });
        // A 2 s node timeout: close() waits up to 7 s, far more than this test's 300 ms hold.
        Relock locks = Relock.create(f, Relock.Settings.defaults().nodeTimeout(Duration.ofSeconds(2)));
        java.util.concurrent.CompletableFuture<Hold> acquiring = java.util.concurrent.CompletableFuture.supplyAsync(
            () -> locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(30))));
        assertTrue(asked.await(20, TimeUnit.SECONDS));
        Thread closer = new Thread(locks::close);
        closer.start();
        // close() has begun (it sets closed first); with the transport closed under it, the
        // grant could not be given back.
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!locks.closed && System.nanoTime() < until) {
            Thread.sleep(1);
        }
        closer.join(300); // marked: close() closing the transport now, without the wait, would do so in this time
        answer.countDown();
        closer.join(20_000);
        assertTrue(!closer.isAlive(), "close() returned");
        Exception e = assertThrows(java.util.concurrent.ExecutionException.class, () -> acquiring.get(20, TimeUnit.SECONDS));
        assertTrue(e.getCause() instanceof NotAcquiredException, "not acquired: the client was closed: " + e.getCause());
        Object owner = f.sentOf("LOCK.ACQUIRE").get(0).get(2);
        assertEquals(List.of(List.of("LOCK.RELEASE", "k", owner, "FROM", 1)), f.sentOf("LOCK.RELEASE"),
            "the grant given back before the connections closed");
    }

    @Test
    void closeOnAnInterruptedThreadWaitsWithoutSpinningAndKeepsTheInterrupt() throws Exception {
        // An acquisition that outlasts close()'s bound (100 ms node timeout: about 1.3 s), and
        // close() called by a thread whose interrupt flag is set (close() in a catch of
        // InterruptedException): each sleep of the wait returned at once, a busy loop.
        CountDownLatch answer = new CountDownLatch(1);
        CountDownLatch asked = new CountDownLatch(1);
        Fake f = new Fake("s", a -> {
            if (a[0].equals("LOCK.ACQUIRE")) {
                asked.countDown();
                try {
                    answer.await(20, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return grants(a);
        });
        Relock locks = Relock.create(f);
        java.util.concurrent.CompletableFuture<Hold> acquiring = java.util.concurrent.CompletableFuture.supplyAsync(
            () -> locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(30))));
        assertTrue(asked.await(20, TimeUnit.SECONDS));
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        long cpu0 = mx.getCurrentThreadCpuTime();
        long wall0 = System.nanoTime();
        Thread.currentThread().interrupt();
        try {
            locks.close();
            assertTrue(Thread.currentThread().isInterrupted(), "the interrupt is kept");
        } finally {
            Thread.interrupted();
            answer.countDown();
        }
        long cpu = mx.getCurrentThreadCpuTime() - cpu0;
        long wall = System.nanoTime() - wall0;
        assertTrue(wall >= TimeUnit.MILLISECONDS.toNanos(1000), "close() waited for the acquisition: " + wall / 1_000_000 + " ms");
        assertTrue(cpu < wall / 4, "close() slept, not spun: " + cpu / 1_000_000 + " ms of CPU in " + wall / 1_000_000 + " ms");
        assertThrows(java.util.concurrent.ExecutionException.class, () -> acquiring.get(20, TimeUnit.SECONDS));
    }

    @Test
    void anInterruptArrivingWhileCloseWaitsIsKept() throws Exception {
        // close() waits (bounded) for an acquisition under way; an interrupt that arrives during
        // that wait was cleared so the wait would not spin, and then lost: the caller's thread
        // came back from close() without its interrupt.
        CountDownLatch answer = new CountDownLatch(1);
        CountDownLatch asked = new CountDownLatch(1);
        Fake f = new Fake("s", a -> {
            if (a[0].equals("LOCK.ACQUIRE")) {
                asked.countDown();
                try {
                    answer.await(20, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return grants(a);
        });
        Relock locks = Relock.create(f);
        java.util.concurrent.CompletableFuture<Hold> acquiring = java.util.concurrent.CompletableFuture.supplyAsync(
            () -> locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(30))));
        assertTrue(asked.await(20, TimeUnit.SECONDS));
        boolean[] keptInterrupt = {false};
        Thread closer = new Thread(() -> {
            locks.close();
            keptInterrupt[0] = Thread.currentThread().isInterrupted();
        });
        closer.start();
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!locks.closed && System.nanoTime() < until) {
            Thread.sleep(1);
        }
        assertTrue(locks.closed, "close() began");
        closer.interrupt(); // during the wait: the acquisition is held up until answer
        closer.join(20_000);
        answer.countDown();
        assertTrue(!closer.isAlive(), "close() returned");
        assertTrue(keptInterrupt[0], "the interrupt that arrived during close() is kept");
        assertThrows(java.util.concurrent.ExecutionException.class, () -> acquiring.get(20, TimeUnit.SECONDS));
    }

    @Test
    void aSingleServersWaitRunsOnTheCallersThreadAndAnInterruptStillCutsIt() throws Exception {
        // The wait is asked on the caller's thread (its grant wakes the caller, not a relock
        // thread that then wakes it); a blocked read does not see an interrupt, so the
        // interrupt watch must cut the connection.
        List<Thread> askedOn = new java.util.concurrent.CopyOnWriteArrayList<>();
        CountDownLatch cut = new CountDownLatch(1);
        Fake f = new Fake("s", a -> {
            if (a[0].equals("LOCK.ACQUIRE")) {
                return null; // held by another owner
            }
            if (a[0].equals("LOCK.WAIT")) {
                askedOn.add(Thread.currentThread());
                if (askedOn.size() == 1) {
                    return 7L;
                }
                try {
                    if (!cut.await(20, TimeUnit.SECONDS)) {
                        return null;
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return new TransportException("cut by relock", true, false, null);
            }
            return grants(a);
        });
        f.onAbort = cut::countDown;
        Relock locks = Relock.create(f);
        Hold h = locks.acquire("k", LockOptions.ttl(Duration.ofSeconds(30)).waitForever());
        assertEquals(Thread.currentThread(), askedOn.get(0), "asked on the caller's thread");
        h.release();
        java.util.concurrent.atomic.AtomicReference<Throwable> got = new java.util.concurrent.atomic.AtomicReference<>();
        Thread waiter = new Thread(() -> {
            try {
                locks.acquire("k2", LockOptions.ttl(Duration.ofSeconds(30)).waitForever());
            } catch (Throwable e) {
                got.set(e);
            }
        });
        waiter.start();
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (askedOn.size() < 2 && System.nanoTime() < until) {
            Thread.sleep(1);
        }
        assertEquals(2, askedOn.size(), "the second wait was sent");
        assertEquals(waiter, askedOn.get(1));
        waiter.interrupt();
        waiter.join(20_000);
        assertTrue(!waiter.isAlive(), "the interrupted wait ended");
        assertEquals(0, cut.getCount(), "its connection was cut");
        assertInstanceOf(NotAcquiredException.class, got.get());
        assertTrue(got.get().getMessage().contains("interrupted"), got.get().getMessage());
        locks.close();
    }
}
