package dev.relock;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A {@link Lock} on one key, as {@link java.util.concurrent.locks.ReentrantLock} is: held by
 * the thread that locked it (a platform or a virtual thread), reentrant (each nested
 * {@code lock()} is a LOCK.REENTER on the server, each {@code unlock()} a release of one
 * step), renewed while held. Each locking thread holds the key under an owner of its own, so
 * two threads of one process exclude each other through the server's queue. {@code unlock()}
 * from a thread that does not hold it throws IllegalMonitorStateException.
 */
public final class RelockLock implements Lock {
    private final Relock c;
    private final String key;
    private final LockOptions options;
    private final Map<Thread, Entry> holds = new ConcurrentHashMap<>();

    /**
     * A thread's hold and how many times it locked it (its unlocks still owed). The count is
     * kept here, not read from whichever Hold is current: once the hold ended by a loss, a
     * nested lock() throws and an inner unlock() only counts down, so that no inner call can
     * take or release the key while an outer section still runs.
     */
    private static final class Entry {
        final Hold hold;
        int count = 1;

        Entry(Hold hold) {
            this.hold = hold;
        }
    }

    RelockLock(Relock c, String key, LockOptions options) {
        this.c = c;
        this.key = key;
        this.options = options;
    }

    /** The hold of the current thread, or null. */
    public Hold hold() {
        Entry e = holds.get(Thread.currentThread());
        return e == null ? null : e.hold;
    }

    /** Whether the current thread holds the lock. */
    public boolean isHeldByCurrentThread() {
        Hold h = hold();
        return h != null && h.isHeld();
    }

    /** How many times the current thread locked it and has not unlocked it yet (0: none); a lost hold's count too. */
    public int getHoldCount() {
        Entry e = holds.get(Thread.currentThread());
        return e == null ? 0 : e.count;
    }

    /**
     * A nested lock: true when the current thread held it and entered one section more; false
     * when it holds nothing. When its hold ended (lost: {@link LockLostException}) it throws
     * that and keeps the thread's count: the outer section's unlock() is still owed.
     */
    private boolean reenter() {
        return reenter(Long.MAX_VALUE);
    }

    /**
     * reenter, waiting at most waitNanos for a step of the hold's count still being given back
     * (tryLock() does not wait: {@link NotAcquiredException}, retryable, the hold kept).
     */
    private boolean reenter(long waitNanos) {
        Entry e = holds.get(Thread.currentThread());
        if (e == null) {
            return false;
        }
        e.hold.check();
        e.hold.enter(waitNanos);
        e.count++;
        return true;
    }

    /** A fresh hold for a thread that holds nothing; throws once the client is closed. */
    private boolean take(LockOptions o) {
        if (c.closed) {
            throw closed(null);
        }
        // Threads that ended holding it: their holds were given back by the renewal timer.
        holds.keySet().removeIf(t -> !t.isAlive());
        try {
            Hold h = c.acquire(key, o);
            h.heldBy(Thread.currentThread());
            holds.put(Thread.currentThread(), new Entry(h));
            return true;
        } catch (NotAcquiredException e) {
            if (c.closed) {
                throw closed(e);
            }
            return false;
        }
    }

    private IllegalStateException closed(Throwable cause) {
        return new IllegalStateException("lock \"" + key + "\": not acquired: the relock client was closed", cause);
    }

    /**
     * Waits without a limit; an interrupt is kept and the wait goes on (as Lock.lock does).
     * Throws {@link LockLostException} when the current thread's hold was lost (a nested lock
     * is never a fresh hold), IllegalStateException once the client is closed.
     */
    @Override
    public void lock() {
        if (reenter()) {
            return;
        }
        boolean interrupted = false;
        while (true) {
            try {
                if (take(options.waitForever())) {
                    break;
                }
            } catch (RelockException e) {
                if (!e.retryable()) {
                    throw e;
                }
            }
            if (Thread.interrupted()) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        try {
            if (reenter()) {
                return;
            }
        } catch (NotAcquiredException e) {
            // Interrupted while the entry waited or was asked: the interrupt is what ended it.
            if (Thread.interrupted()) {
                InterruptedException ie = new InterruptedException();
                ie.initCause(e);
                throw ie;
            }
            throw e;
        }
        while (!take(options.waitForever())) {
            if (Thread.interrupted()) {
                throw new InterruptedException();
            }
        }
    }

    @Override
    public boolean tryLock() {
        return reenter(0) || take(options.waitAtMost(Duration.ZERO));
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        if (reenter(Math.max(0, unit.toNanos(time)))) {
            return true;
        }
        boolean got = take(options.waitAtMost(Duration.ofNanos(Math.max(0, unit.toNanos(time)))));
        if (!got && Thread.interrupted()) {
            throw new InterruptedException();
        }
        return got;
    }

    /**
     * One step down: the last releases the key. Throws IllegalMonitorStateException when the
     * current thread does not hold it, {@link LockLostException} when the hold was lost (an
     * inner unlock() counts down all the same and never releases the key).
     */
    @Override
    public void unlock() {
        Entry e = holds.get(Thread.currentThread());
        if (e == null) {
            throw new IllegalMonitorStateException("lock \"" + key + "\" is not held by this thread");
        }
        Hold h = e.hold;
        if (e.count > 1) {
            e.count--;
            h.exit();
            h.check();
            return;
        }
        holds.remove(Thread.currentThread());
        h.release();
    }

    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("relock locks have no conditions");
    }
}
