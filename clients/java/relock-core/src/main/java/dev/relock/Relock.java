package dev.relock;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.IntFunction;
import java.util.concurrent.locks.ReadWriteLock;

/**
 * Locks on one Redis server with the relock module, on a Redis Cluster, or with Redlock over
 * several independent masters. Every hold has an owner of its own, so threads sharing one
 * Relock exclude each other. Thread-safe.
 *
 * <pre>{@code
 * try (Relock locks = RelockJedis.create(new HostAndPort("127.0.0.1", 6379));
 *      Hold hold = locks.acquire("orders:7", LockOptions.ttl(Duration.ofSeconds(30)).waitAtMost(Duration.ofSeconds(5)))) {
 *     hold.check();          // throws LockLostException with the reason once it is lost
 * }                          // released
 * }</pre>
 */
public final class Relock implements AutoCloseable {

    /** Settings of a Relock; immutable, each method returns a new value. */
    public static final class Settings {
        final Duration nodeTimeout;
        final Duration retryDelay;
        final Duration maxPartialHold;
        final String ownerPrefix;
        final int replicaAcks;
        final Duration ackTimeout;

        private Settings(Duration nodeTimeout, Duration retryDelay, Duration maxPartialHold, String ownerPrefix,
                         int replicaAcks, Duration ackTimeout) {
            this.nodeTimeout = nodeTimeout;
            this.retryDelay = retryDelay;
            this.maxPartialHold = maxPartialHold;
            this.ownerPrefix = ownerPrefix;
            this.replicaAcks = replicaAcks;
            this.ackTimeout = ackTimeout;
        }

        /** node timeout 100 ms, retry delay 200 ms, partial hold 500 ms, owner prefix host/pid. */
        public static Settings defaults() {
            return new Settings(Duration.ofMillis(100), Duration.ofMillis(200), Duration.ofMillis(500), null, 0, Duration.ZERO);
        }

        /** How long one server may take to answer one non-blocking command (default 100 ms). */
        public Settings nodeTimeout(Duration d) {
            return new Settings(d, retryDelay, maxPartialHold, ownerPrefix, replicaAcks, ackTimeout);
        }

        /** The mean pause between two rounds of a Redlock wait (default 200 ms). */
        public Settings retryDelay(Duration d) {
            return new Settings(nodeTimeout, d, maxPartialHold, ownerPrefix, replicaAcks, ackTimeout);
        }

        /** How long a Redlock wait keeps a minority of grants (default 500 ms). */
        public Settings maxPartialHold(Duration d) {
            return new Settings(nodeTimeout, retryDelay, d, ownerPrefix, replicaAcks, ackTimeout);
        }

        /** Replaces {@code <host>/<pid>} in the owners relock makes ("": the random part alone). */
        public Settings ownerPrefix(String p) {
            return new Settings(nodeTimeout, retryDelay, maxPartialHold, p, replicaAcks, ackTimeout);
        }

        /**
         * Every acquisition, renewal, re-entry and campaign waits, on each master, until n of
         * its replicas acknowledged the write ({@code WAIT n timeout} on the write's own
         * connection, right after it). A grant fewer acknowledged is released there at once and
         * that master counts as failed (the error names it and how many acknowledged); a
         * renewal not acknowledged does not count, except on a master with fewer replicas
         * connected than n, once every connected one acknowledged it. n 0 (the default): off.
         * It narrows, not closes, the window in which a failover loses a lock.
         */
        public Settings replicaAcks(int n, Duration timeout) {
            return new Settings(nodeTimeout, retryDelay, maxPartialHold, ownerPrefix, n, timeout);
        }
    }

    // Platform threads of relock's own: renewals and the calls of a round are never queued
    // behind virtual threads, a blocked caller or an application's exhausted executor.
    static final ExecutorService IO = Executors.newCachedThreadPool(daemon("relock-io"));
    static final ScheduledExecutorService TIMER = timer();

    private static ScheduledExecutorService timer() {
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, daemon("relock-timer"));
        t.setRemoveOnCancelPolicy(true);
        return t;
    }

    private static ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    final Transport[] nodes;
    final String[] names;
    final boolean cluster;
    final long nodeTimeoutMs;
    final long retryDelayMs;
    final long maxPartialHoldMs;
    final String ownerPrefix;
    /** replica acknowledgements: replicas (0: off) and WAIT's timeout in ms. */
    final int acks;
    final long ackTimeoutMs;
    final Set<Hold> live = ConcurrentHashMap.newKeySet();
    private final AtomicInteger background = new AtomicInteger();
    /** acquisitions, group acquisitions and campaigns under way: close() waits for them. */
    private final AtomicInteger acquiring = new AtomicInteger();
    volatile boolean closed;
    /** the rounds under way and the observers: close() cuts their blocking calls. */
    private final Set<OpenCalls> active = ConcurrentHashMap.newKeySet();
    private final Set<AutoCloseable> observers = ConcurrentHashMap.newKeySet();
    /** set by close() after a second for the give-backs: the rest stop (their ttl ends them). */
    private volatile boolean stopBackground;

    private Relock(List<Transport> transports, Settings s) {
        if (transports.isEmpty()) {
            throw RelockException.invalid("no servers given");
        }
        this.nodes = transports.toArray(new Transport[0]);
        this.names = new String[nodes.length];
        Set<String> seen = new HashSet<>();
        boolean anyCluster = false;
        for (int i = 0; i < nodes.length; i++) {
            names[i] = nodes[i].name();
            if (!seen.add(names[i])) {
                throw RelockException.invalid(names[i] + " is named twice: Redlock needs independent masters");
            }
            anyCluster |= nodes[i].isCluster();
        }
        if (anyCluster && nodes.length > 1) {
            throw RelockException.invalid("Redlock takes independent masters; pass a cluster alone");
        }
        this.cluster = anyCluster;
        if (s.nodeTimeout.toMillis() < 1) {
            throw RelockException.invalid("node timeout " + s.nodeTimeout + " is below 1 ms");
        }
        this.nodeTimeoutMs = s.nodeTimeout.toMillis();
        this.retryDelayMs = Math.max(1, s.retryDelay.toMillis());
        this.maxPartialHoldMs = s.maxPartialHold.toMillis();
        this.ownerPrefix = s.ownerPrefix;
        if (s.replicaAcks < 0 || (s.replicaAcks > 0 && s.ackTimeout.toMillis() < 1)) {
            throw RelockException.invalid("replica acknowledgements " + s.replicaAcks + " within " + s.ackTimeout
                + ": give 0 (off) or more replicas, within 1 ms or more");
        }
        this.acks = s.replicaAcks;
        this.ackTimeoutMs = s.ackTimeout.toMillis();
    }

    /** Locks on one server or one Redis Cluster. */
    public static Relock create(Transport transport) {
        return new Relock(List.of(transport), Settings.defaults());
    }

    public static Relock create(Transport transport, Settings settings) {
        return new Relock(List.of(transport), settings);
    }

    /** Redlock over independent masters: a lock is held when a quorum (N/2+1) granted it. */
    public static Relock redlock(List<? extends Transport> masters, Settings settings) {
        return new Relock(new ArrayList<>(masters), settings);
    }

    public static Relock redlock(List<? extends Transport> masters) {
        return redlock(masters, Settings.defaults());
    }

    /** The servers' names, in the order given. */
    public List<String> servers() {
        return List.of(names);
    }

    /** How many servers must agree: N/2 + 1. */
    public int quorum() {
        return Round.quorum(nodes.length);
    }

    /** A fresh owner, {@code <host>/<pid>/<32 hex>}. */
    public String newOwner() {
        return Rules.makeOwner(ownerPrefix);
    }

    int masters() {
        return cluster ? 1 : nodes.length;
    }

    /**
     * Releases every hold of this Relock still held, waits a little for the give-backs running
     * in the background, and closes relock's own connections (not the application's). Waits
     * under way are cut; an acquisition under way (a round not blocking) is waited for, about a
     * few node timeouts at most, so that it can give back what it is granted while the
     * connections are still open. The calling thread's interrupt status is kept, not acted on.
     */
    @Override
    public void close() {
        // The waits below are short and bounded: an interrupted caller (close() in a catch of
        // InterruptedException) must not turn them into a busy loop. Its flag is set again after.
        boolean interrupted = Thread.interrupted();
        try {
            interrupted |= closeNow();
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Closes; true when the thread was interrupted during its bounded waits (the flag is cleared). */
    private boolean closeNow() {
        boolean interrupted = false;
        closed = true;
        // The waits and observers under way end now (their connections close: the servers
        // drop the waiters), and Close gives back what a wait was granted meanwhile.
        for (OpenCalls calls : active) {
            calls.cutAll();
        }
        for (AutoCloseable o : observers) {
            try {
                o.close();
            } catch (Exception e) {
                // closing the rest matters more
            }
        }
        // An acquisition under way (its round not blocking, so not cut) ends within its node
        // timeout: waited for while the connections are still open, it gives back what it was
        // granted itself, as it sees the client closed. Closed at once, its give-back would fail
        // and the grant would keep the key from everyone until its ttl ran out.
        long settle = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(3 * nodeTimeoutMs + ackTimeoutMs + 1000);
        while (acquiring.get() > 0 && settle - System.nanoTime() > 0) {
            if (!sleepMs(5)) {
                interrupted |= Thread.interrupted(); // interrupted meanwhile: still bounded, never a spin
            }
        }
        for (Hold h : new ArrayList<>(live)) {
            h.releaseAs(new LockLostException(h.key(), "lock \"" + h.key() + "\": the client was closed (Relock.close), which released it",
                new LossReason("", null, "the client was closed", null), servers()));
        }
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
        while (background.get() > 0 && until - System.nanoTime() > 0) {
            if (!sleepMs(10)) {
                interrupted |= Thread.interrupted();
            }
        }
        stopBackground = true;
        for (Transport t : nodes) {
            try {
                t.close();
            } catch (RuntimeException e) {
                // closing the rest matters more
            }
        }
        return interrupted;
    }

    // --- rounds ------------------------------------------------------------------------

    static final class RoundOpts {
        boolean[] targets;
        boolean untilAll;
        /** each command's bound, ms; 0: the node timeout (blocking: none). */
        long timeoutMs;
        boolean blocking;
        String key;
        long partialHoldMs;
        IntFunction<Object[]> argsOf;
        /** turns a reply into the value agreed (null: refused). */
        Function<Object, Object> accept;
        /** how the write waits for replica acknowledgements; undo takes a grant back. */
        AckMode acked = AckMode.NONE;
        Object[] undo;

        RoundOpts(String key) {
            this.key = key;
        }

        RoundOpts all() {
            untilAll = true;
            return this;
        }

        RoundOpts on(boolean[] t) {
            targets = t;
            return this;
        }

        RoundOpts withArgs(IntFunction<Object[]> a) {
            argsOf = a;
            return this;
        }

        RoundOpts accepting(Function<Object, Object> a) {
            accept = a;
            return this;
        }

        /** A new grant: not acknowledged, it is undone there (undo) and that master fails. */
        RoundOpts grant(Object... undoArgs) {
            acked = AckMode.GRANT;
            undo = undoArgs;
            return this;
        }

        /** A renewal: not acknowledged, it does not count (but see ROLE). */
        RoundOpts renewal() {
            acked = AckMode.RENEW;
            return this;
        }
    }

    enum AckMode { NONE, GRANT, RENEW }

    record Reply(int i, Object v, Failure f) {}

    static IntFunction<Object[]> fixed(Object... args) {
        return i -> args;
    }

    /** The connections of a round's blocking calls still under way, and whether the round is over. */
    static final class OpenCalls {
        final Set<Transport.Connection> conns = ConcurrentHashMap.newKeySet();
        volatile boolean over;

        void add(Transport.Connection c) {
            conns.add(c);
            if (over) {
                c.abort(); // the round ended before this call began: it must not queue
            }
        }

        void cutAll() {
            over = true;
            for (Transport.Connection c : conns) {
                try {
                    c.abort();
                } catch (RuntimeException e) {
                    // a transport's abort() that throws: the other calls are cut all the same
                }
            }
        }
    }

    private Reply ask(int i, Object[] args, RoundOpts o, OpenCalls open) {
        Transport n = nodes[i];
        boolean acking = acks > 0 && o.acked != AckMode.NONE;
        try {
            Object v;
            Object ack = null;
            if (o.blocking || acking) {
                // A connection of its own: a blocking command, or a write and its WAIT (which
                // must not queue on a connection other commands share).
                long bound = o.blocking ? o.timeoutMs : (o.timeoutMs > 0 ? o.timeoutMs : nodeTimeoutMs);
                if (acking && bound > 0) {
                    bound += ackTimeoutMs;
                }
                Transport.Connection c = n.dedicated(o.key);
                open.add(c);
                boolean whole = false;
                try {
                    Duration d = bound > 0 ? Duration.ofMillis(bound) : null;
                    if (acking) {
                        List<Object> rs = c.pipeline(d, List.of(args, new Object[] {"WAIT", acks, Math.max(1, ackTimeoutMs)}));
                        if (rs.get(0) instanceof ReplyError e) {
                            whole = true;
                            throw e;
                        }
                        v = rs.get(0);
                        ack = rs.get(1);
                    } else {
                        v = c.call(d, args);
                    }
                    whole = true;
                } finally {
                    open.conns.remove(c);
                    if (!whole) {
                        c.abort();
                    }
                    c.close();
                }
            } else {
                v = n.call(o.key, Duration.ofMillis(o.timeoutMs > 0 ? o.timeoutMs : nodeTimeoutMs), args);
            }
            if (o.accept != null) {
                v = o.accept.apply(v);
            }
            if (acking && v != null && !(ack instanceof Long got && got >= acks)) {
                Failure f = notAcked(n, o, ack);
                if (f != null) {
                    return new Reply(i, null, f);
                }
            }
            return new Reply(i, v, null);
        } catch (RuntimeException e) {
            return new Reply(i, null, Failure.classify(e, n.isCluster()));
        }
    }

    /**
     * A write fewer replicas acknowledged (ack: WAIT's count, or its error): null when it
     * counts all the same (a renewal on a master with fewer replicas connected, every one of
     * which acknowledged it); else that master's failure, after a grant was undone there.
     */
    private Failure notAcked(Transport n, RoundOpts o, Object ack) {
        long acked = ack instanceof Long l ? l : 0;
        if (o.acked == AckMode.RENEW && ack instanceof Long) {
            try {
                Object role = n.call(o.key, Duration.ofMillis(nodeTimeoutMs), "ROLE");
                if (role instanceof List<?> r && r.size() >= 3 && "master".equals(Replies.text(r.get(0)))) {
                    int connected = Replies.list(r.get(2)).size();
                    if (connected < acks && acked >= connected) {
                        return null;
                    }
                }
            } catch (RuntimeException e) {
                // not known: it does not count
            }
        }
        boolean undone = false;
        if (o.acked == AckMode.GRANT && o.undo != null) {
            try {
                n.call(o.key, Duration.ofMillis(nodeTimeoutMs), o.undo);
                undone = true;
            } catch (RuntimeException e) {
                // given back by the round's give-back
            }
        }
        Failure f = Failure.transientOf(ack instanceof ReplyError e
            ? "the replica acknowledgements (WAIT " + acks + ") failed: " + e.text()
            : "only " + acked + " of " + acks + " required replica acknowledgements within " + ackTimeoutMs + " ms", false);
        f.undone = undone;
        if (o.acked == AckMode.GRANT) {
            f.msg += " (the grant was released there again)";
        }
        return f;
    }

    /** Sends args (or argsOf's) to every server targets selects, until decided (or all answered). */
    Round round(Object[] args, RoundOpts o) {
        Round rnd = new Round(names, System.nanoTime(), o.untilAll);
        if (nodes.length == 1 && !o.blocking && !(acks > 0 && o.acked != AckMode.NONE)) {
            if (o.targets != null && !o.targets[0]) {
                rnd.onReply(0, null, null);
            } else {
                Reply r = ask(0, o.argsOf != null ? o.argsOf.apply(0) : args, o, null);
                rnd.onReply(0, r.v(), r.f());
            }
            return rnd.finish(System.nanoTime());
        }
        OpenCalls open = new OpenCalls();
        active.add(open);
        if (closed && o.blocking) {
            open.cutAll();
        }
        try {
            Thread me = Thread.currentThread();
            if (nodes.length == 1 && o.blocking && !(acks > 0 && o.acked != AckMode.NONE) && (o.targets == null || o.targets[0])
                    && !InterruptWatch.isVirtual(me)) {
                return blockingHere(rnd, args, o, open, me);
            }
            return roundEach(rnd, args, o, open);
        } finally {
            active.remove(open);
        }
    }

    /**
     * One server's blocking call (LOCK.WAIT, a campaign) asked on the caller's own thread: its
     * grant wakes the caller directly. Through one of relock's threads it woke that thread,
     * which then woke the caller, and on a busy 2-core machine that second wake-up made the
     * 1 % slowest hand-offs 1 to 3 ms instead of about 0.4 ms (bench/clients/java). An
     * interrupt cuts the call through {@link InterruptWatch} within its poll period, and the
     * round ends as the other path ends an interrupted one.
     */
    private Round blockingHere(Round rnd, Object[] args, RoundOpts o, OpenCalls open, Thread me) {
        Reply r;
        if (me.isInterrupted()) {
            open.cutAll();
            r = new Reply(0, null, Failure.transientOf("interrupted", true));
        } else {
            Runnable unwatch = InterruptWatch.watch(me, open);
            try {
                r = ask(0, o.argsOf != null ? o.argsOf.apply(0) : args, o, open);
            } finally {
                unwatch.run();
            }
            if (r.f() != null && me.isInterrupted()) {
                r = new Reply(0, null, Failure.transientOf("interrupted", true));
            }
        }
        open.cutAll();
        rnd.onReply(0, r.v(), r.f());
        return rnd.finish(System.nanoTime());
    }

    private Round roundEach(Round rnd, Object[] args, RoundOpts o, OpenCalls open) {
        LinkedBlockingQueue<Reply> replies = new LinkedBlockingQueue<>();
        int pending = 0;
        for (int i = 0; i < nodes.length; i++) {
            if (o.targets != null && !o.targets[i]) {
                rnd.onReply(i, null, null);
                continue;
            }
            pending++;
            final int k = i;
            final Object[] a = o.argsOf != null ? o.argsOf.apply(i) : args;
            IO.execute(() -> replies.add(ask(k, a, o, open)));
        }
        long cutAt = 0;
        boolean interrupted = false;
        while (pending > 0 && rnd.progress() == Round.Progress.PENDING) {
            Reply r;
            try {
                if (cutAt != 0) {
                    long left = cutAt - System.nanoTime();
                    r = left > 0 ? replies.poll(left, TimeUnit.NANOSECONDS) : null;
                    if (r == null) {
                        break;
                    }
                } else {
                    r = replies.take();
                }
            } catch (InterruptedException e) {
                interrupted = true;
                break;
            }
            pending--;
            rnd.onReply(r.i(), r.v(), r.f());
            if (o.partialHoldMs > 0 && rnd.nAgreed > 0 && cutAt == 0) {
                cutAt = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(o.partialHoldMs);
            }
        }
        if (o.blocking || interrupted) {
            // Cut the waits still under way (their connections close: the servers drop them).
            open.cutAll();
            for (int i = 0; i < nodes.length; i++) {
                if (!rnd.answered[i] && rnd.progress() == Round.Progress.PENDING) {
                    rnd.onReply(i, null, Failure.transientOf(interrupted ? "interrupted" : "no quorum within the partial-hold limit", true));
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        return rnd.finish(System.nanoTime());
    }

    /**
     * Gives a hold back in the background (a release harmless to repeat: FROM) on targets
     * (null: all): again, a little longer apart each time, until each answered or the ttl
     * passed; then once more 100 ms later (a grant still under way lands before it).
     */
    void releaseLate(long ttlMs, String key, IntFunction<Object[]> argsOf, boolean[] targets) {
        releaseLate(ttlMs, key, argsOf, targets, null);
    }

    /**
     * releaseLate, running done (if not null) once: when the background job ends, however it
     * ends, or, with several masters, as soon as its first try left a master unanswered (one
     * that is down: a section's entry waiting on done must not wait the ttl out for it; a
     * Redlock hold goes on without it, and a count that master gets wrong is outvoted). With
     * one server the entry needs that server anyway: it waits.
     */
    void releaseLate(long ttlMs, String key, IntFunction<Object[]> argsOf, boolean[] targets, Runnable done) {
        boolean[] all = new boolean[nodes.length];
        java.util.Arrays.fill(all, true);
        boolean[] left = targets == null ? all : targets.clone();
        boolean[] first = left.clone();
        java.util.concurrent.atomic.AtomicBoolean pending = new java.util.concurrent.atomic.AtomicBoolean(done != null);
        Runnable settled = () -> {
            if (pending.getAndSet(false)) {
                done.run();
            }
        };
        background.incrementAndGet();
        IO.execute(() -> {
            try {
                long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ttlMs + nodeTimeoutMs);
                long delay = 20;
                boolean firstTry = true;
                while (any(left)) {
                    Round r = round(null, new RoundOpts(key).all().on(left.clone()).withArgs(argsOf));
                    boolean[] un = r.unanswered();
                    for (int i = 0; i < left.length; i++) {
                        left[i] = left[i] && un[i];
                    }
                    if (firstTry && nodes.length > 1 && any(left)) {
                        settled.run();
                    }
                    firstTry = false;
                    if (!any(left) || System.nanoTime() > until || stopBackground) {
                        break;
                    }
                    sleepMs(delay);
                    delay = Math.min(delay * 2, 1000);
                }
                sleepMs(100);
                if (!stopBackground) {
                    round(null, new RoundOpts(key).all().on(first).withArgs(argsOf));
                }
            } finally {
                background.decrementAndGet();
                settled.run();
            }
        });
    }

    static boolean any(boolean[] b) {
        for (boolean x : b) {
            if (x) {
                return true;
            }
        }
        return false;
    }

    static boolean sleepMs(long ms) {
        if (ms <= 0) {
            return true;
        }
        try {
            Thread.sleep(ms);
            return true;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Gives back what a failed acquisition round may have granted. */
    void releaseFailed(String key, String owner, long ttlMs, Round rnd) {
        boolean[][] gb = rnd.giveBack();
        IntFunction<Object[]> rel = fixed("LOCK.RELEASE", key, owner, "FROM", 1);
        if (any(gb[0])) {
            Round back = round(null, new RoundOpts(key).all().on(gb[0]).withArgs(rel));
            boolean[] un = back.unanswered();
            if (any(un)) {
                releaseLate(ttlMs, key, rel, un);
            }
        }
        if (any(gb[1])) {
            releaseLate(ttlMs, key, rel, gb[1]);
        }
    }

    // --- acquiring -----------------------------------------------------------------------

    /**
     * Takes key: at once, or waiting ({@link LockOptions#waitAtMost}) in the key's queue.
     * Throws {@link NotAcquiredException} when not granted in time (also when the thread is
     * interrupted: its interrupt status is kept), another {@link RelockException} when retrying
     * cannot help. The hold is renewed every ttl/3 until released or lost.
     */
    public Hold acquire(String key, LockOptions options) {
        return acquire(key, options, true);
    }

    /** {@link #acquire} with the default options (ttl 30 s, try once). */
    public Hold acquire(String key) {
        return acquire(key, LockOptions.defaults());
    }

    /** {@link #acquire}, empty instead of a {@link NotAcquiredException}. */
    public Optional<Hold> tryAcquire(String key, LockOptions options) {
        try {
            return Optional.of(acquire(key, options));
        } catch (NotAcquiredException e) {
            return Optional.empty();
        }
    }

    public Optional<Hold> tryAcquire(String key) {
        return tryAcquire(key, LockOptions.defaults());
    }

    private static Object[] concat(List<Object> head, List<Object> tail) {
        List<Object> all = new ArrayList<>(head);
        all.addAll(tail);
        return all.toArray();
    }

    Hold acquire(String key, LockOptions o, boolean autoRenew) {
        return inFlight(() -> acquireUntilDone(key, o, autoRenew));
    }

    /** Runs an acquisition counted as under way, for close(). */
    private <T> T inFlight(java.util.function.Supplier<T> acquisition) {
        acquiring.incrementAndGet();
        try {
            return acquisition.get();
        } finally {
            acquiring.decrementAndGet();
        }
    }

    /** h, unless the client was closed meanwhile: then h is given back and nothing returned. */
    private Hold unlessClosed(Hold h, String key) {
        if (closed) {
            try {
                h.release();
            } catch (RuntimeException e) {
                // given back in the background or at its ttl
            }
            throw new NotAcquiredException(key, "lock \"" + key + "\": not acquired: the client was closed", List.of(), null);
        }
        return h;
    }

    private Hold acquireUntilDone(String key, LockOptions o, boolean autoRenew) {
        if (key == null) {
            throw RelockException.invalid("a key is needed");
        }
        long ttlMs = Rules.checkTtl(o.ttl);
        Rules.checkMode(o.limit, o.permits, masters());
        List<Object> mode = Rules.modeArgs(o.shared, o.limit, o.permits);
        boolean limited = o.wait != null;
        long deadline = limited ? System.nanoTime() + o.wait.toNanos() : Long.MAX_VALUE;
        boolean waits = !limited || !o.wait.isZero();
        while (true) {
            if (closed) {
                throw new NotAcquiredException(key, "lock \"" + key + "\": not acquired: the client was closed", List.of(), null);
            }
            if (Thread.currentThread().isInterrupted()) {
                throw new NotAcquiredException(key, "lock \"" + key + "\": not acquired: the thread was interrupted", List.of(),
                    new InterruptedException());
            }
            String owner = newOwner();
            long remaining = limited ? deadline - System.nanoTime() : Long.MAX_VALUE;
            boolean tryOnly = !waits || (limited && remaining <= 0);
            Object[] args = concat(List.of("LOCK.ACQUIRE", key, owner, ttlMs), mode);
            Round rnd;
            if (tryOnly || nodes.length == 1) {
                rnd = round(args, new RoundOpts(key).grant("LOCK.RELEASE", key, owner, "FROM", 1));
            } else {
                rnd = new Round(names, System.nanoTime(), false);
            }
            // The wait goes on under the same owner only when no grant of the first round can
            // still be there: every failure a refusal or an undo the server answered. An undo
            // whose reply was lost may run after a same-owner LOCK.WAIT grant and release it
            // (two holders): that owner is given back below and the retry asks as a new one.
            if (!rnd.won() && !tryOnly && !rnd.permanentlyFailed() && rnd.onlyUndone()) {
                rnd = waitRound(key, owner, ttlMs, remaining, limited, mode);
            }
            long valid = rnd.validUs(ttlMs);
            long started = rnd.startedNanos;
            if (rnd.grantedLate(ttlMs)) {
                Round renewal = round(new Object[] {"LOCK.RENEW", key, owner, ttlMs}, new RoundOpts(key).renewal());
                valid = renewal.validUs(ttlMs);
                started = renewal.startedNanos;
                if (valid < 0) {
                    rnd = renewal;
                }
            }
            if (valid >= 0 && rnd.won()) {
                long[] tokens = tokensOf(rnd);
                return unlessClosed(new Hold(this, key, null, owner, ttlMs, tokens, started + valid * 1000, mode, autoRenew), key);
            }
            releaseFailed(key, owner, ttlMs, rnd);
            boolean interrupted = Thread.currentThread().isInterrupted();
            boolean passed = tryOnly || (limited && System.nanoTime() >= deadline) || interrupted || closed;
            long waited = limited && o.wait.toMillis() > 0 ? o.wait.toMillis() : 0;
            RelockException e = rnd.afterFailed(key, ttlMs, waited, passed, limited);
            if (e != null) {
                if (interrupted && e instanceof NotAcquiredException) {
                    throw new NotAcquiredException(key, "lock \"" + key + "\": not acquired: the thread was interrupted", List.of(),
                        new InterruptedException());
                }
                throw e;
            }
            long delay = Rules.jitterMs(retryDelayMs);
            if (limited) {
                delay = Math.min(delay, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
            }
            sleepMs(delay);
        }
    }

    long[] tokensOf(Round rnd) {
        long[] tokens = new long[nodes.length];
        for (int i = 0; i < nodes.length; i++) {
            if (rnd.agreed[i] != null) {
                tokens[i] = Replies.toLong(rnd.agreed[i], 0);
            }
        }
        return tokens;
    }

    /** One LOCK.WAIT round; remainingNanos is what is left of the wait (limited). */
    Round waitRound(String key, String owner, long ttlMs, long remainingNanos, boolean limited, List<Object> mode) {
        long waitMs = limited ? Math.max(1, Math.min(Rules.MAX_MS, TimeUnit.NANOSECONDS.toMillis(remainingNanos))) : 0;
        Object[] args = concat(List.of("LOCK.WAIT", key, owner, ttlMs, waitMs), mode);
        RoundOpts ro = new RoundOpts(key).grant("LOCK.RELEASE", key, owner, "FROM", 1);
        ro.blocking = true;
        ro.timeoutMs = limited ? waitMs + Rules.WAIT_GRACE_MS + nodeTimeoutMs : 0;
        if (nodes.length > 1) {
            ro.partialHoldMs = Math.min(maxPartialHoldMs, ttlMs / 4);
        }
        Round rnd = round(args, ro);
        boolean[] cut = new boolean[nodes.length];
        boolean anyCut = false;
        for (int i = 0; i < cut.length; i++) {
            cut[i] = !rnd.answered[i];
            anyCut |= cut[i];
        }
        if (rnd.won() && anyCut) {
            // The waits a quorum made unneeded were cut: ask those masters once more with
            // LOCK.ACQUIRE (confirms a grant that landed, or takes a free key).
            Round extra = round(concat(List.of("LOCK.ACQUIRE", key, owner, ttlMs), mode), new RoundOpts(key).all().on(cut).grant("LOCK.RELEASE", key, owner, "FROM", 1));
            for (int i = 0; i < nodes.length; i++) {
                if (extra.agreed[i] != null) {
                    rnd.addGrant(i, extra.agreed[i]);
                }
            }
        }
        return rnd;
    }

    // --- groups ------------------------------------------------------------------------

    /**
     * Takes several keys as one hold (LOCK.MACQUIRE: all or none; waiting, key by key in a
     * fixed order on one server, or whole rounds with Redlock). Exclusive only. In a cluster
     * the keys must share a hash tag.
     */
    public Hold acquireAll(List<String> keys, LockOptions o) {
        return inFlight(() -> acquireAllUntilDone(keys, o));
    }

    private Hold acquireAllUntilDone(List<String> keys, LockOptions o) {
        if (keys == null || keys.isEmpty() || keys.size() > Rules.MAX_KEYS) {
            throw RelockException.invalid("a group takes 1 to " + Rules.MAX_KEYS + " keys");
        }
        List<String> group = List.copyOf(keys);
        if (new HashSet<>(group).size() != group.size()) {
            throw RelockException.invalid("a key is named twice in the group " + group);
        }
        if (o.shared) {
            throw RelockException.invalid("a group takes exclusive holds only");
        }
        long ttlMs = Rules.checkTtl(o.ttl);
        String name = String.join(",", group);
        boolean limited = o.wait != null;
        long deadline = limited ? System.nanoTime() + o.wait.toNanos() : Long.MAX_VALUE;
        int n = group.size();
        Function<Object, Object> accept = r -> {
            if (r == null) {
                return null;
            }
            if (!(r instanceof List<?> l) || l.size() != n) {
                throw new Failure.BadReply("LOCK.MACQUIRE answered " + r + " for " + n + " keys");
            }
            return r;
        };
        while (true) {
            if (closed) {
                throw new NotAcquiredException(name, "lock \"" + name + "\": not acquired: the client was closed", List.of(), null);
            }
            String owner = newOwner();
            IntFunction<Object[]> rel = fixed(groupArgs("LOCK.MRELEASE", group, owner, "FROM", 1));
            Round rnd = round(groupArgs("LOCK.MACQUIRE", group, owner, ttlMs), new RoundOpts(group.get(0)).accepting(accept).grant(rel.apply(0)));
            long valid = rnd.validUs(ttlMs);
            if (valid >= 0) {
                List<?> first = null;
                for (Object v : rnd.agreed) {
                    if (v != null) {
                        first = (List<?>) v;
                        break;
                    }
                }
                Map<String, Long> kt = new LinkedHashMap<>();
                for (int i = 0; i < n; i++) {
                    kt.put(group.get(i), Replies.toLong(first.get(i), 0));
                }
                return unlessClosed(groupHold(group, owner, ttlMs, rnd, kt, rnd.startedNanos + valid * 1000), name);
            }
            boolean[][] gb = rnd.giveBack();
            if (any(gb[0])) {
                boolean[] un = round(null, new RoundOpts(group.get(0)).all().on(gb[0]).withArgs(rel)).unanswered();
                if (any(un)) {
                    releaseLate(ttlMs, group.get(0), rel, un);
                }
            }
            if (any(gb[1])) {
                releaseLate(ttlMs, group.get(0), rel, gb[1]);
            }
            if (rnd.permanentlyFailed()) {
                throw rnd.permanentError(group.get(0));
            }
            boolean interrupted = Thread.currentThread().isInterrupted();
            if ((limited && o.wait.isZero()) || (limited && System.nanoTime() >= deadline) || interrupted || closed) {
                throw rnd.acquireError(name, ttlMs, limited ? o.wait.toMillis() : 0);
            }
            if (nodes.length == 1 && !rnd.someFailed()) {
                Hold h = waitEach(group, owner, ttlMs, deadline, limited);
                if (h != null) {
                    return unlessClosed(h, name);
                }
                continue; // a key taken early was lost while waiting: start again
            }
            long delay = Rules.jitterMs(retryDelayMs);
            if (limited) {
                delay = Math.min(delay, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
            }
            sleepMs(delay);
        }
    }

    static Object[] groupArgs(String command, List<String> keys, String owner, Object... tail) {
        List<Object> a = new ArrayList<>();
        a.add(command);
        a.add(keys.size());
        a.addAll(keys);
        a.add(owner);
        a.addAll(List.of(tail));
        return a.toArray();
    }

    private Hold groupHold(List<String> group, String owner, long ttlMs, Round rnd, Map<String, Long> kt, long untilNanos) {
        long[] tokens = new long[nodes.length];
        for (int i = 0; i < nodes.length; i++) {
            if (rnd.agreed[i] != null) {
                tokens[i] = kt.get(group.get(0));
            }
        }
        Hold h = new Hold(this, group.get(0), group, owner, ttlMs, tokens, untilNanos, List.of(), true);
        h.keyTokens = Collections.unmodifiableMap(kt);
        return h;
    }

    static Function<Object, Object> allOf(int n) {
        return r -> r == null || Replies.toLong(r, -1) != n ? null : r;
    }

    /**
     * One server: waits for the keys one by one in byte order (no deadlock between groups),
     * renewing the keys taken; null when a key taken was lost meanwhile (start again).
     */
    private Hold waitEach(List<String> group, String owner, long ttlMs, long deadline, boolean limited) {
        List<String> taken = new ArrayList<>();
        Map<String, Long> tokens = new LinkedHashMap<>();
        Consumer<List<String>> giveBack = keys -> {
            if (!keys.isEmpty()) {
                releaseLate(ttlMs, keys.get(0), fixed(groupArgs("LOCK.MRELEASE", keys, owner, "FROM", 1)), null);
            }
        };
        List<String> order = new ArrayList<>(group);
        order.sort((a, b) -> java.util.Arrays.compareUnsigned(a.getBytes(java.nio.charset.StandardCharsets.UTF_8),
            b.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        for (String key : order) {
            while (true) {
                long remaining = deadline - System.nanoTime();
                if ((limited && remaining <= 0) || Thread.currentThread().isInterrupted() || closed) {
                    giveBack.accept(taken);
                    throw new NotAcquiredException(group.get(0), "locks " + group + ": not all acquired in time", List.of(), null);
                }
                long piece = remaining;
                boolean pieceLimited = limited;
                long third = TimeUnit.MILLISECONDS.toNanos(ttlMs / 3);
                if (!taken.isEmpty() && (!limited || third < remaining)) {
                    piece = third;
                    pieceLimited = true;
                }
                Round rnd = waitRound(key, owner, ttlMs, piece, pieceLimited, List.of());
                if (rnd.won()) {
                    taken.add(key);
                    for (Object v : rnd.agreed) {
                        if (v != null) {
                            tokens.put(key, Replies.toLong(v, 0));
                        }
                    }
                    break;
                }
                if (rnd.permanentlyFailed()) {
                    List<String> back = new ArrayList<>(taken);
                    back.add(key);
                    giveBack.accept(back);
                    throw rnd.permanentError(key);
                }
                if (rnd.someFailed()) {
                    sleepMs(Math.min(Rules.jitterMs(retryDelayMs), Math.max(0, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()))));
                    if (!rnd.onlyUndone()) {
                        List<String> back = new ArrayList<>(taken);
                        back.add(key);
                        giveBack.accept(back);
                        return null;
                    }
                }
                if (!taken.isEmpty()) {
                    Round renewal = round(groupArgs("LOCK.MRENEW", taken, owner, ttlMs), new RoundOpts(taken.get(0)).accepting(allOf(taken.size())).renewal());
                    if (renewal.renewLost()) {
                        giveBack.accept(taken);
                        return null;
                    }
                }
            }
        }
        Round renewal = round(groupArgs("LOCK.MRENEW", group, owner, ttlMs), new RoundOpts(group.get(0)).accepting(allOf(group.size())).renewal());
        long valid = renewal.validUs(ttlMs);
        if (valid < 0) {
            giveBack.accept(group);
            return null;
        }
        Map<String, Long> kt = new LinkedHashMap<>();
        for (String k : group) {
            kt.put(k, tokens.get(k));
        }
        return groupHold(group, owner, ttlMs, renewal, kt, renewal.startedNanos + valid * 1000);
    }

    // --- java.util.concurrent views --------------------------------------------------------

    /**
     * A {@link java.util.concurrent.locks.Lock} on key: held by the thread that locked it,
     * reentrant through LOCK.REENTER (as ReentrantLock), renewed while held. ttl as given.
     */
    public RelockLock lock(String key, Duration ttl) {
        return new RelockLock(this, key, LockOptions.ttl(ttl));
    }

    /** {@link #lock(String, Duration)} with a ttl of 30 s. */
    public RelockLock lock(String key) {
        return lock(key, LockOptions.DEFAULT_TTL);
    }

    /** A {@link ReadWriteLock} on key: readers share it (SHARED), a writer holds it alone. */
    public ReadWriteLock readWriteLock(String key) {
        return readWriteLock(key, LockOptions.DEFAULT_TTL);
    }

    public ReadWriteLock readWriteLock(String key, Duration ttl) {
        RelockLock read = new RelockLock(this, key, LockOptions.ttl(ttl).shared());
        RelockLock write = new RelockLock(this, key, LockOptions.ttl(ttl));
        return new ReadWriteLock() {
            @Override
            public java.util.concurrent.locks.Lock readLock() {
                return read;
            }

            @Override
            public java.util.concurrent.locks.Lock writeLock() {
                return write;
            }
        };
    }

    /** A counting semaphore of n permits at key, each hold a lease (Redisson's RPermitExpirableSemaphore). */
    public RelockSemaphore semaphore(String key, int permits) {
        Rules.checkMode(permits, 0, masters());
        return new RelockSemaphore(this, key, permits);
    }

    // --- elections -----------------------------------------------------------------------

    private void electionCheck(LockOptions o) {
        if (masters() > 1) {
            throw RelockException.invalid("elections run on one server or a cluster, never over Redlock masters: a term must come "
                + "from one sequence, and FIFO order does not compose across independent queues");
        }
        if (o != null && o.shared) {
            throw RelockException.invalid("an election is an exclusive lock: shared and limit do not apply");
        }
    }

    /**
     * Campaigns for key with the proclaimed value: waits in the key's queue (without a limit
     * unless o says) and returns the leadership once granted; its term is the hold's token.
     */
    public Leadership campaign(String key, String value, LockOptions o) {
        return inFlight(() -> campaignUntilDone(key, value, o));
    }

    private Leadership campaignUntilDone(String key, String value, LockOptions o) {
        electionCheck(o);
        long ttlMs = Rules.checkTtl(o.ttl);
        boolean limited = o.wait != null && !o.wait.isZero();
        long deadline = limited ? System.nanoTime() + o.wait.toNanos() : Long.MAX_VALUE;
        while (true) {
            if (closed) {
                throw new NotAcquiredException(key, "lock \"" + key + "\": not acquired: the client was closed", List.of(), null);
            }
            String owner = value.isEmpty() ? "/" + Rules.withRandom("") : Rules.withRandom(value);
            Round rnd = waitRound(key, owner, ttlMs, deadline - System.nanoTime(), limited, List.of());
            long valid = rnd.validUs(ttlMs);
            long started = rnd.startedNanos;
            if (rnd.grantedLate(ttlMs)) {
                Round renewal = round(new Object[] {"LOCK.RENEW", key, owner, ttlMs}, new RoundOpts(key).renewal());
                valid = renewal.validUs(ttlMs);
                started = renewal.startedNanos;
                if (valid < 0) {
                    rnd = renewal;
                }
            }
            if (valid >= 0 && rnd.won()) {
                Hold h = new Hold(this, key, null, owner, ttlMs, tokensOf(rnd), started + valid * 1000, List.of(), true);
                return new Leadership(unlessClosed(h, key), proclaimed(owner));
            }
            releaseFailed(key, owner, ttlMs, rnd);
            boolean interrupted = Thread.currentThread().isInterrupted();
            boolean passed = (limited && System.nanoTime() >= deadline) || interrupted || closed;
            RelockException e = rnd.afterFailed(key, ttlMs, limited ? o.wait.toMillis() : 0, passed, limited);
            if (e != null) {
                throw e;
            }
            sleepMs(Math.min(Rules.jitterMs(retryDelayMs), Math.max(0, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()))));
        }
    }

    /** campaign waiting without a limit, ttl 30 s. */
    public Leadership campaign(String key, String value) {
        return campaign(key, value, LockOptions.defaults().waitForever());
    }

    static String proclaimed(String owner) {
        int i = owner.lastIndexOf('/');
        return i >= 0 ? owner.substring(0, i) : "";
    }

    static Optional<LeaderInfo> leaderOf(Info info) {
        if (info == null) {
            return Optional.empty();
        }
        if (info.mode().equals("shared") || info.owner() == null || info.token() == null) {
            throw RelockException.invalid("key is a shared lock, not an election");
        }
        return Optional.of(new LeaderInfo(proclaimed(info.owner()), info.owner(), info.token(), info.ttlMs()));
    }

    /** The current leader of key (LOCK.INFO), or empty. */
    public Optional<LeaderInfo> leader(String key) {
        electionCheck(null);
        return leaderOf(info(key).orElse(null));
    }

    /**
     * Watches key's leadership (LOCK.OBSERVE on a connection of its own): calls observer with
     * the current leader first, then at every change (regressed: a term lower than one seen),
     * until the returned handle is closed. The observer runs on relock's own thread.
     */
    public AutoCloseable observe(String key, Consumer<Observation> observer) {
        electionCheck(null);
        Transport n = nodes[0];
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        java.util.concurrent.atomic.AtomicReference<Transport.Connection> current = new java.util.concurrent.atomic.AtomicReference<>();
        IO.execute(() -> {
            long known = 0;
            long highest = 0;
            boolean first = true;
            while (!stop.get() && !closed) {
                Object v;
                try {
                    if (first) {
                        v = n.call(key, Duration.ofMillis(Math.max(nodeTimeoutMs, 1000)), "LOCK.INFO", key);
                    } else {
                        Transport.Connection c = n.dedicated(key);
                        current.set(c);
                        boolean whole = false;
                        try {
                            if (stop.get()) {
                                return;
                            }
                            v = c.call(Duration.ofMillis(10_000 + Rules.WAIT_GRACE_MS), "LOCK.OBSERVE", key, known, 10_000);
                            whole = true;
                        } finally {
                            current.set(null);
                            if (!whole) {
                                c.abort();
                            }
                            c.close();
                        }
                    }
                } catch (RuntimeException e) {
                    if (stop.get() || closed) {
                        return;
                    }
                    Failure f = Failure.classify(e, n.isCluster());
                    if (f.permanent) {
                        observer.accept(new Observation(null, false, new RelockException(RelockException.Kind.SERVER, key,
                            "observing \"" + key + "\": " + f.msg, List.of(n.name()), -1, false, e)));
                        return;
                    }
                    sleepMs(Rules.jitterMs(retryDelayMs));
                    continue;
                }
                Optional<LeaderInfo> leader;
                try {
                    leader = leaderOf(Replies.info(n.name(), v));
                } catch (RelockException e) {
                    observer.accept(new Observation(null, false, e));
                    return;
                }
                long term = leader.map(LeaderInfo::term).orElse(0L);
                if ((first || term != known) && !stop.get()) {
                    observer.accept(new Observation(leader.orElse(null), term != 0 && term < highest, null));
                }
                first = false;
                known = term;
                highest = Math.max(highest, term);
            }
        });
        AutoCloseable[] handle = new AutoCloseable[1];
        handle[0] = () -> {
            stop.set(true);
            observers.remove(handle[0]);
            Transport.Connection c = current.get();
            if (c != null) {
                c.abort();
            }
        };
        observers.add(handle[0]);
        return handle[0];
    }

    // --- looking at locks --------------------------------------------------------------------

    private List<Object> queryEach(String key, Object... args) {
        List<Object> out = new ArrayList<>();
        for (int i = 0; i < nodes.length; i++) {
            try {
                out.add(nodes[i].call(key, Duration.ofMillis(Math.max(nodeTimeoutMs, 1000)), args));
            } catch (RuntimeException e) {
                Failure f = Failure.classify(e, nodes[i].isCluster());
                throw new RelockException(RelockException.Kind.SERVER, key, "lock \"" + key + "\" on " + names[i] + ": " + f.msg,
                    List.of(names[i]), -1, !f.permanent, e);
            }
        }
        return out;
    }

    /** LOCK.INFO: the lock at key (with Redlock, the first server's that has one), or empty. */
    public Optional<Info> info(String key) {
        List<Object> rs = queryEach(key, "LOCK.INFO", key);
        for (int i = 0; i < rs.size(); i++) {
            Info info = Replies.info(names[i], rs.get(i));
            if (info != null) {
                return Optional.of(info);
            }
        }
        return Optional.empty();
    }

    /** LOCK.HOLDERS on every server: key's holds in grant order (count per server; 0: all). */
    public List<Holder> holders(String key, int count) {
        List<Object> rs = queryEach(key, "LOCK.HOLDERS", key, "COUNT", count);
        List<Holder> out = new ArrayList<>();
        for (int i = 0; i < rs.size(); i++) {
            out.addAll(Replies.holders(names[i], rs.get(i)));
        }
        return out;
    }

    /** LOCK.WAITERS on every server: key's queue in order (count per server; 0: all). */
    public List<Waiter> waiters(String key, int count) {
        List<Object> rs = queryEach(key, "LOCK.WAITERS", key, "COUNT", count);
        List<Waiter> out = new ArrayList<>();
        for (int i = 0; i < rs.size(); i++) {
            out.addAll(Replies.waiters(names[i], rs.get(i)));
        }
        return out;
    }

    /** LOCK.HISTORY on every server: key's holds that ended other than by their owner, newest first. */
    public List<LogEntry> history(String key, int count) {
        List<Object> rs = queryEach(key, "LOCK.HISTORY", key, count);
        List<LogEntry> out = new ArrayList<>();
        for (int i = 0; i < rs.size(); i++) {
            out.addAll(Replies.log(names[i], rs.get(i)));
        }
        return out;
    }

    /**
     * LOCK.FORCERELEASE key on every server: how many holds were removed. An admin command.
     * Sent at most once to each server (run again after its reply was lost, it would remove a
     * hold taken since): a lost reply is a MAY_HAVE_RUN {@link RelockException}, not retryable.
     */
    public long forceRelease(String key) {
        long n = 0;
        for (int i = 0; i < nodes.length; i++) {
            try {
                n += Replies.toLong(nodes[i].callOnce(key, Duration.ofMillis(Math.max(nodeTimeoutMs, 1000)), "LOCK.FORCERELEASE", key), 0);
            } catch (TransportException e) {
                String before = i > 0 ? " (it ran on the " + i + " servers before)" : "";
                if (e.sent()) {
                    throw new RelockException(RelockException.Kind.MAY_HAVE_RUN, key, "lock \"" + key + "\" on " + names[i]
                        + ": LOCK.FORCERELEASE's reply was lost (" + e.getMessage() + "): it may have run, and was not sent again" + before,
                        List.of(names[i]), -1, false, e);
                }
                throw new RelockException(RelockException.Kind.SERVER, key, "lock \"" + key + "\" on " + names[i]
                    + ": LOCK.FORCERELEASE was not sent (" + e.getMessage() + "): nothing ran there" + before, List.of(names[i]), -1, true, e);
            } catch (RuntimeException e) {
                Failure f = Failure.classify(e, nodes[i].isCluster());
                throw new RelockException(RelockException.Kind.SERVER, key, "lock \"" + key + "\" on " + names[i] + ": " + f.msg,
                    List.of(names[i]), -1, !f.permanent, e);
            }
        }
        return n;
    }

    /** LOCK.STATS COUNT count on every master: the hottest keys by total wait time. */
    public List<KeyStats> stats(int count) {
        List<KeyStats> out = new ArrayList<>();
        for (int i = 0; i < nodes.length; i++) {
            for (Object r : nodes[i].callEachMaster(Duration.ofMillis(Math.max(nodeTimeoutMs, 1000)), "LOCK.STATS", "COUNT", count)) {
                out.addAll(Replies.stats(names[i], r));
            }
        }
        return out;
    }

    /** Asks the servers' journals why owner's hold of keys ended. */
    LossReason explainLoss(List<String> keys, String owner, long since) {
        for (String key : keys) {
            for (int i = 0; i < nodes.length; i++) {
                try {
                    Object v = nodes[i].call(key, Duration.ofMillis(Math.max(nodeTimeoutMs, 500)), "LOCK.HISTORY", key, 100);
                    LossReason r = Replies.lossReason(Replies.log(names[i], v), owner, since);
                    if (!r.cause().isEmpty()) {
                        return r;
                    }
                } catch (RuntimeException e) {
                    // the next server may know
                }
            }
        }
        return new LossReason("", null, Replies.UNKNOWN_LOSS, null);
    }
}
