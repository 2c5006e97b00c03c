package dev.relock;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.IntFunction;

/**
 * A lock held by this process (one key, or a group of keys taken together), renewed every
 * ttl/3 by relock's own scheduler until released or lost. try-with-resources releases it.
 * Thread-safe.
 */
public final class Hold implements AutoCloseable {
    private final Relock c;
    private final String key;
    private final List<String> group;
    private final String owner;
    private final long ttlMs;
    private final long[] tokens;
    Map<String, Long> keyTokens;
    private final long since = System.currentTimeMillis();
    private final boolean autoRenew;

    private final Object mu = new Object();
    private List<Object> mode;
    private long validUntilNanos;
    private String lastFailure;
    /** null while held; then the reason it ended (RELEASED, or a LockLostException). */
    private RuntimeException ended;
    /** A loss the servers reported, its reason not known yet ({@link #knownLost}). */
    private LockLostException known;
    private boolean renewingNow;
    private long nextNanos;
    private ScheduledFuture<?> timer;
    private final CompletableFuture<LossReason> lost = new CompletableFuture<>();
    /** orders the count-changing steps; count is the reentrancy count the servers hold. */
    final ReentrantLock stepping = new ReentrantLock();
    long count = 1;
    /** Steps of the count being given back in the background ({@link #lateStep}), under mu. */
    private int lateSteps;
    private final ReentrantLock renewing = new ReentrantLock();
    /** The thread a {@link RelockLock} hold belongs to (null for other holds): see {@link #tick}. */
    private volatile Thread heldBy;

    private static final RuntimeException RELEASED = new IllegalStateException("relock: the hold was released");

    Hold(Relock c, String key, List<String> group, String owner, long ttlMs, long[] tokens, long validUntilNanos,
         List<Object> mode, boolean autoRenew) {
        this.c = c;
        this.key = key;
        this.group = group;
        this.owner = owner;
        this.ttlMs = ttlMs;
        this.tokens = tokens;
        this.validUntilNanos = validUntilNanos;
        this.mode = mode;
        this.autoRenew = autoRenew;
        c.live.add(this);
        synchronized (mu) {
            nextNanos = System.nanoTime() + every();
            armLocked();
        }
    }

    /** The key held (a group's first key). */
    public String key() {
        return key;
    }

    /** The keys held: [key()], or a group's keys in the order given. */
    public List<String> keys() {
        return group != null ? group : List.of(key);
    }

    /** The owner, {@code <host>/<pid>/<random>}: what LOCK.INFO and LOCK.HOLDERS show. */
    public String owner() {
        return owner;
    }

    public Duration ttl() {
        return Duration.ofMillis(ttlMs);
    }

    /**
     * The fencing token: the first granting server's (a group: its first key's). Hand it to
     * whatever the holder writes, which refuses tokens lower than the latest it saw.
     */
    public long token() {
        if (group != null) {
            return keyTokens.get(group.get(0));
        }
        for (long t : tokens) {
            if (t != 0) {
                return t;
            }
        }
        return 0;
    }

    /** A group's token of k. */
    public long tokenOf(String k) {
        Long t = keyTokens == null ? null : keyTokens.get(k);
        if (t == null) {
            if (group == null && k.equals(key)) {
                return token();
            }
            throw RelockException.invalid("key \"" + k + "\" is not held by this hold");
        }
        return t;
    }

    /** The tokens per server that granted the hold (Redlock: one per master). */
    public Map<String, Long> tokens() {
        Map<String, Long> out = new LinkedHashMap<>();
        for (int i = 0; i < tokens.length; i++) {
            if (tokens[i] != 0) {
                out.put(c.names[i], tokens[i]);
            }
        }
        return out;
    }

    /** What is left of the validity (ttl less round time and drift), as last measured; ZERO once ended. */
    public Duration validFor() {
        synchronized (mu) {
            if (ended != null || known != null) {
                return Duration.ZERO;
            }
            return Duration.ofNanos(Math.max(0, validUntilNanos - System.nanoTime()));
        }
    }

    /**
     * Completes with the loss reason (from LOCK.HISTORY where the server knew) the moment the
     * hold is lost; never completes after a release.
     */
    public CompletableFuture<LossReason> lost() {
        expireIfPast();
        return lost;
    }

    /** Whether the hold is still held and within its validity. */
    public boolean isHeld() {
        expireIfPast();
        synchronized (mu) {
            return ended == null && known == null;
        }
    }

    /**
     * The servers said the hold is gone (a renewal, re-entry or downgrade answered nil); the
     * reason is being asked for (LOCK.HISTORY, up to keys x servers x 500 ms), and until it
     * comes check() and isHeld() already say lost: the client knows the key was taken.
     */
    private void knownLost(String what) {
        LockLostException l = new LockLostException(key, "lock \"" + key + "\" was lost: " + what,
            new LossReason("", null, what, null), c.servers());
        synchronized (mu) {
            if (known == null) {
                known = l;
            }
        }
    }

    /**
     * Throws {@link LockLostException} (with the reason) once the hold is lost, an
     * IllegalStateException once released; nothing while held. It reads the clock: past the
     * validity it is lost even if no renewal ran.
     */
    public void check() {
        expireIfPast();
        synchronized (mu) {
            if (ended != null) {
                throw ended;
            }
            if (known != null) {
                throw known;
            }
        }
    }

    private long lostAtLocked() {
        return validUntilNanos - Rules.lossLeadNanos(ttlMs);
    }

    private void expireIfPast() {
        boolean past;
        synchronized (mu) {
            past = ended == null && System.nanoTime() - lostAtLocked() >= 0;
        }
        if (past) {
            expire();
        }
    }

    /**
     * Loses the hold because its validity ran out, unless a renewal moved the validity since it
     * was looked at: the check and the end are one step under {@code mu}, so a renewal answering
     * at that moment either extends the hold first or finds it ended and says so
     * ({@link #renewOnce}). The Go client's Mutex.Extend answered true for a hold being given
     * back when the two interleaved (attack round of 2026-12-05); this hold had the same steps.
     */
    private void expire() {
        String reason = expiryReason();
        LockLostException lost = new LockLostException(key, "lock \"" + key + "\" was lost: " + reason,
            new LossReason("", null, reason, null), c.servers());
        if (endIf(lost, () -> System.nanoTime() - lostAtLocked() >= 0)) {
            c.releaseLate(ttlMs, key, Relock.fixed(releaseArgs()), null);
        }
    }

    private String expiryReason() {
        synchronized (mu) {
            if (lastFailure != null) {
                return "its validity ran out: renewals failed (" + lastFailure + ")";
            }
            if (renewingNow) {
                return "its validity ran out while a renewal was still unanswered";
            }
            if (!autoRenew) {
                return "its validity ran out (not extended in time)";
            }
            return "its validity ran out before it could be renewed (the process did not run the renewal in time: stalled longer than the "
                + ttlMs + " ms ttl?)";
        }
    }

    private long every() {
        return Math.max(TimeUnit.MILLISECONDS.toNanos(ttlMs) / 3, 1_000_000);
    }

    /** Sets the timer to the next wake: the renewal or the loss, whichever is first. Under mu. */
    private void armLocked() {
        if (ended != null) {
            return;
        }
        long wake = lostAtLocked();
        if (autoRenew && nextNanos - wake < 0) {
            wake = nextNanos;
        }
        if (timer != null) {
            timer.cancel(false);
        }
        timer = Relock.TIMER.schedule(() -> Relock.IO.execute(this::tick), Math.max(0, wake - System.nanoTime()), TimeUnit.NANOSECONDS);
    }

    /** Ties the hold to the thread that holds it through a {@link RelockLock}. */
    void heldBy(Thread t) {
        heldBy = t;
    }

    /**
     * One wake, on relock's own thread: past the validity the hold is lost; otherwise renewed.
     * A {@link RelockLock} hold whose thread ended without unlock() (an Error, a task cancelled
     * between lock() and try) is given back instead: nothing can unlock it any more, and renewed
     * it would be held until the process exits.
     */
    private void tick() {
        Thread t = heldBy;
        if (t != null && !t.isAlive()) {
            try {
                releaseAs(new LockLostException(key, "lock \"" + key + "\" was given back: the thread holding it ("
                    + t.getName() + ") ended without unlock()",
                    new LossReason("", null, "the thread holding it ended without unlock()", null), c.servers()));
            } catch (RuntimeException e) {
                // Not given back (no quorum answered): renewals have stopped, so it lapses at its ttl.
            }
            return;
        }
        long lostAt;
        boolean busy;
        boolean renewNow;
        synchronized (mu) {
            if (ended != null) {
                return;
            }
            lostAt = lostAtLocked();
            busy = renewingNow;
            renewNow = !busy && autoRenew && System.nanoTime() - lostAt < 0;
            if (renewNow) {
                // Wake at the loss even while the renewal runs: a renewal can stall.
                renewingNow = true;
                if (timer != null) {
                    timer.cancel(false);
                }
                timer = Relock.TIMER.schedule(() -> Relock.IO.execute(this::tick), Math.max(0, lostAt - System.nanoTime()), TimeUnit.NANOSECONDS);
            }
        }
        if (System.nanoTime() - lostAt >= 0) {
            expire();
            return;
        }
        if (busy) {
            return;
        }
        boolean ok = false;
        if (renewNow) {
            try {
                ok = renewOnce();
            } catch (RuntimeException e) {
                ok = false;
            }
        }
        synchronized (mu) {
            renewingNow = false;
            if (autoRenew) {
                long now = System.nanoTime();
                nextNanos = ok ? now + every() : now + Math.min(every() / 4, Math.max(0, (validUntilNanos - now) / 2));
            }
            armLocked();
        }
    }

    private Object[] renewArgs() {
        if (group != null) {
            return Relock.groupArgs("LOCK.MRENEW", group, owner, ttlMs);
        }
        return new Object[] {"LOCK.RENEW", key, owner, ttlMs};
    }

    private Object[] releaseArgs() {
        if (group != null) {
            return Relock.groupArgs("LOCK.MRELEASE", group, owner, "FROM", 1);
        }
        return new Object[] {"LOCK.RELEASE", key, owner, "FROM", 1};
    }

    /** One renewal round: true when renewed; the hold is lost when no quorum can renew any more. */
    private boolean renewOnce() {
        renewing.lock();
        try {
            check();
            Relock.RoundOpts ro = new Relock.RoundOpts(key).renewal();
            if (group != null) {
                ro.accepting(Relock.allOf(group.size()));
            }
            Round rnd = c.round(renewArgs(), ro);
            long valid = rnd.validUs(ttlMs);
            if (valid >= 0) {
                synchronized (mu) {
                    if (ended == null) {
                        validUntilNanos = rnd.startedNanos + valid * 1000;
                        lastFailure = null;
                        return true;
                    }
                }
                // Ended while the round ran (its validity ran out and it is being given back, or
                // it was released): the servers' renewal, applied before that give-back, does not
                // revive it.
                check();
                return false;
            }
            if (rnd.badTtl()) {
                throw new RelockException(RelockException.Kind.SERVER, key, "lock \"" + key + "\": renewal to a ttl of " + ttlMs
                    + " ms refused (" + rnd.describe(f -> f.badTtl) + "); the hold is kept with its ttl (ask for a shorter ttl)");
            }
            if (rnd.renewLost()) {
                List<String> refused = rnd.servers(f -> f.refused);
                String what = refused.isEmpty() ? "renewal failed: " + rnd.describe(f -> f.permanent)
                    : "LOCK.RENEW answered nil on " + String.join(", ", refused) + ": the lock expired or was taken away";
                knownLost(what);
                LossReason loss = c.explainLoss(keys(), owner, since);
                String where = loss.entry() != null && group != null && !loss.entry().key().isEmpty()
                    ? "key \"" + loss.entry().key() + "\" " : "";
                lose(what + ": " + where + loss.message(), loss);
                check();
            }
            synchronized (mu) {
                lastFailure = rnd.describe(null);
            }
            throw new RelockException(RelockException.Kind.NO_QUORUM, key, "lock \"" + key + "\": renewal without a quorum ("
                + rnd.describe(null) + "); still held for " + validFor().toMillis() + " ms unless renewed", rnd.servers(null), -1, true, null);
        } finally {
            renewing.unlock();
        }
    }

    /**
     * Renews now (relock also does it every ttl/3): throws {@link LockLostException} when the
     * hold is gone, a NO_QUORUM {@link RelockException} when no quorum answered (still held
     * for {@link #validFor()}).
     */
    public void renew() {
        renewOnce();
    }

    /** Ends the hold on the client's side; false if it had ended already. */
    private boolean end(RuntimeException why) {
        return endIf(why, null);
    }

    /** {@link #end}, only if {@code still} (null: always) holds when looked at under {@code mu}. */
    private boolean endIf(RuntimeException why, java.util.function.BooleanSupplier still) {
        synchronized (mu) {
            if (ended != null || (still != null && !still.getAsBoolean())) {
                return false;
            }
            ended = why;
            if (timer != null) {
                timer.cancel(false);
            }
        }
        c.live.remove(this);
        if (why instanceof LockLostException l) {
            lost.complete(l.reason());
        }
        return true;
    }

    void lose(String reason, LossReason loss) {
        LossReason r = loss != null ? loss : new LossReason("", null, reason, null);
        if (end(new LockLostException(key, "lock \"" + key + "\" was lost: " + reason, r, c.servers()))) {
            c.releaseLate(ttlMs, key, Relock.fixed(releaseArgs()), null);
        }
    }

    /**
     * Gives the lock back. Throws {@link LockLostException} when the servers said it was no
     * longer held (or relock knew first), a NO_QUORUM {@link RelockException} when no quorum
     * answered (given back in the background, a repeat changes nothing: FROM 1), a SERVER one
     * when errors retrying cannot fix refused it. Releasing twice does nothing.
     */
    public void release() {
        releaseAs(RELEASED);
    }

    void releaseAs(RuntimeException why) {
        if (!end(why)) {
            RuntimeException prev;
            synchronized (mu) {
                prev = ended;
            }
            if (prev instanceof LockLostException l && why == RELEASED) {
                throw l;
            }
            return;
        }
        // The sections still entered are taken down first, one FROM step each.
        stepping.lock();
        try {
            for (; count > 1; count--) {
                IntFunction<Object[]> step = Relock.fixed("LOCK.RELEASE", key, owner, "FROM", count);
                Round rnd = c.round(null, new Relock.RoundOpts(key).all().withArgs(step));
                boolean[] un = rnd.unanswered();
                if (Relock.any(un)) {
                    c.releaseLate(ttlMs, key, step, un);
                }
            }
        } finally {
            stepping.unlock();
        }
        Object[] args = releaseArgs();
        Round rnd = c.round(args, new Relock.RoundOpts(key).all());
        if (rnd.someUnanswered()) {
            c.releaseLate(ttlMs, key, Relock.fixed(args), rnd.unanswered());
        }
        if (rnd.won() || why != RELEASED) {
            return;
        }
        RelockException e = rnd.releaseError(key);
        if (e != null) {
            throw e;
        }
        if (!rnd.someFailed()) {
            throw new LockLostException(key, "lock \"" + key + "\" was no longer held when released (LOCK.RELEASE answered nil)",
                new LossReason("", null, "it was no longer held when released", null), c.servers());
        }
        throw new RelockException(RelockException.Kind.NO_QUORUM, key, "lock \"" + key + "\": release without a quorum ("
            + rnd.describe(null) + "); given back in the background", rnd.servers(f -> !f.refused), -1, true, null);
    }

    /** Releases; a failure is not thrown (release() reports it; the loss is in lost()). */
    @Override
    public void close() {
        try {
            release();
        } catch (RelockException e) {
            // reported by lost() and release(); close() must not mask the block's own exception
        }
    }

    /**
     * Takes the reentrancy count up by one on the servers (LOCK.REENTER ... FROM c). An entry
     * without a quorum is taken back wherever it may have run.
     */
    void enter(long waitNanos) {
        if (group != null) {
            throw RelockException.invalid("a group cannot be reentered");
        }
        stepping.lock();
        try {
            settleSteps(waitNanos);
            long from = count;
            List<Object> args = new ArrayList<>(List.of("LOCK.REENTER", key, owner, ttlMs));
            synchronized (mu) {
                args.addAll(mode);
            }
            args.add("FROM");
            args.add(from);
            Round rnd = c.round(args.toArray(), new Relock.RoundOpts(key)
                .accepting(r -> r == null || Replies.toLong(r, -1) != from + 1 ? null : r)
                .grant("LOCK.RELEASE", key, owner, "FROM", from + 1));
            if (rnd.won()) {
                count = from + 1;
                return;
            }
            IntFunction<Object[]> back = Relock.fixed("LOCK.RELEASE", key, owner, "FROM", from + 1);
            boolean[] un = c.round(null, new Relock.RoundOpts(key).all().withArgs(back)).unanswered();
            if (Relock.any(un)) {
                c.releaseLate(ttlMs, key, back, un, lateStep());
            }
            if (rnd.renewLost() && rnd.refused() > 0) {
                knownLost("LOCK.REENTER answered nil");
                LossReason loss = c.explainLoss(keys(), owner, since);
                lose("LOCK.REENTER answered nil: " + loss.message(), loss);
                check();
            }
            if (rnd.permanentlyFailed()) {
                throw rnd.permanentError(key);
            }
            throw new NotAcquiredException(key, "lock \"" + key + "\": the nested section was not entered: no quorum ("
                + rnd.describe(null) + "); still held", rnd.servers(null), null);
        } finally {
            stepping.unlock();
        }
    }

    /** Takes the count back down by one (LOCK.RELEASE ... FROM count). */
    void exit() {
        stepping.lock();
        try {
            if (count <= 1) {
                return;
            }
            boolean isEnded;
            synchronized (mu) {
                isEnded = ended != null;
            }
            IntFunction<Object[]> step = Relock.fixed("LOCK.RELEASE", key, owner, "FROM", count);
            count--;
            if (isEnded) {
                c.releaseLate(ttlMs, key, step, null);
                return;
            }
            boolean[] un = c.round(null, new Relock.RoundOpts(key).all().withArgs(step)).unanswered();
            if (Relock.any(un)) {
                c.releaseLate(ttlMs, key, step, un, lateStep());
            }
        } finally {
            stepping.unlock();
        }
    }

    /**
     * Counts a step of the count (a section's exit, an entry taken back) given back in the
     * background until the returned hook runs (when that job ended, its repeat 100 ms later
     * included, or when its first try left a server that is down unanswered); a section's
     * entry waits for none to be left (settleSteps).
     */
    private Runnable lateStep() {
        synchronized (mu) {
            lateSteps++;
        }
        return () -> {
            synchronized (mu) {
                lateSteps--;
                mu.notifyAll();
            }
        };
    }

    /**
     * Under stepping, before a section's entry: waits while a step of the count is being given
     * back in the background. That give-back is sent once more 100 ms after it was answered,
     * FROM the count it moved from, and an entry asks FROM that same count: the repeat would
     * take the new section's count back (a nested section then refused; the attack on the Go
     * client of 2026-12-05). Bounded: about a round and the repeat, a round with a server down; a hold
     * lost meanwhile throws (check). An interrupt is kept, not acted on, as Lock.lock does.
     */
    private void settleSteps(long waitNanos) {
        boolean interrupted = false;
        long start = System.nanoTime();
        try {
            while (true) {
                check();
                synchronized (mu) {
                    if (lateSteps == 0) {
                        return;
                    }
                    long left = waitNanos - (System.nanoTime() - start);
                    if (left <= 0) {
                        throw new NotAcquiredException(key, "lock \"" + key + "\": the nested section was not entered: a step of"
                            + " its count is still being given back to a server that has not answered it; still held", List.of(), null);
                    }
                    try {
                        mu.wait(Math.max(1, Math.min(10, TimeUnit.NANOSECONDS.toMillis(left))));
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Turns an exclusive hold into a shared one of the same key in one atomic step (same token
     * and ttl; the shared waiters at the head of the queue are granted with it).
     */
    public void downgrade() {
        if (group != null) {
            throw RelockException.invalid("a group cannot be downgraded");
        }
        check();
        Round rnd = c.round(new Object[] {"LOCK.DOWNGRADE", key, owner}, new Relock.RoundOpts(key).all());
        if (rnd.won()) {
            synchronized (mu) {
                mode = List.of("SHARED");
            }
            return;
        }
        if (rnd.permanentlyFailed()) {
            throw rnd.permanentError(key);
        }
        if (rnd.renewLost()) {
            knownLost("LOCK.DOWNGRADE answered nil");
            LossReason loss = c.explainLoss(keys(), owner, since);
            lose("LOCK.DOWNGRADE answered nil: " + loss.message(), loss);
            check();
        }
        throw new RelockException(RelockException.Kind.NO_QUORUM, key, "lock \"" + key + "\": downgrade without a quorum ("
            + rnd.describe(null) + ")", rnd.servers(null), -1, true, null);
    }

    /**
     * Runs a command through {@code LOCK.FENCED key token command args...}: the server runs it
     * only while the hold's token is a live hold's, atomically with that check, and returns its
     * reply. Sent at most once: a lost reply is a MAY_HAVE_RUN {@link RelockException} (the
     * write may have run and was not sent again); a stale token a FENCED one (nothing ran).
     * The inner command's own errors are thrown as {@link ReplyError}. One server or a cluster
     * only; in a cluster put the data under the lock's hash tag.
     */
    public Object fenced(Object... command) {
        if (c.nodes.length > 1) {
            throw RelockException.invalid("fenced needs one server or a cluster: with Redlock each master has its own tokens");
        }
        if (group != null) {
            throw RelockException.invalid("fenced is for a hold of one key");
        }
        if (command.length == 0) {
            throw RelockException.invalid("fenced needs a command");
        }
        Object[] full = new Object[command.length + 3];
        full[0] = "LOCK.FENCED";
        full[1] = key;
        full[2] = token();
        System.arraycopy(command, 0, full, 3, command.length);
        try {
            return c.nodes[0].callOnce(key, Duration.ofMillis(Math.max(c.nodeTimeoutMs, 1000)), full);
        } catch (ReplyError e) {
            String msg = e.text();
            if (msg.startsWith("FENCED ")) {
                throw new RelockException(RelockException.Kind.FENCED, key, "lock \"" + key + "\": the write was refused by the server: "
                    + msg.substring(7), List.of(c.names[0]), -1, false, e);
            }
            if (msg.startsWith("ERR ") && (msg.contains("in LOCK.FENCED") || msg.contains("LOCK.FENCED needs"))) {
                throw new RelockException(RelockException.Kind.INVALID, key, msg.substring(4), List.of(), -1, false, e);
            }
            if (msg.startsWith("ERR unknown command") && msg.toUpperCase().contains("LOCK.FENCED")) {
                throw new RelockException(RelockException.Kind.SERVER, key, msg + " (this relock module is older than LOCK.FENCED)",
                    List.of(c.names[0]), -1, false, e);
            }
            throw e;
        } catch (TransportException e) {
            if (e.sent()) {
                throw new RelockException(RelockException.Kind.MAY_HAVE_RUN, key, "lock \"" + key + "\": the fenced write's reply was lost ("
                    + e.getMessage() + "): it may have run, and was not sent again", List.of(c.names[0]), -1, false, e);
            }
            throw new RelockException(RelockException.Kind.SERVER, key, "lock \"" + key + "\": the fenced write was not sent ("
                + e.getMessage() + "): nothing ran", List.of(c.names[0]), -1, true, e);
        }
    }

    @Override
    public String toString() {
        return "Hold[" + keys() + ", owner " + owner + ", token " + token() + "]";
    }
}
