package dev.relock;

import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;

/**
 * {@link CompletableFuture} variants of {@link Relock}'s and {@link Hold}'s calls.
 *
 * <p><b>How they run.</b> relock's rules (rounds, Redlock quorums, waits on a connection of
 * their own) are blocking calls; each async call runs one of them on an executor of
 * RelockAsync's own: daemon platform threads named {@code relock-async-N}, made as needed
 * and never the {@code ForkJoinPool.commonPool()}, so a saturated common pool, virtual threads
 * or a blocked caller do not delay them, and a long {@code LOCK.WAIT} takes a thread of this
 * executor, none of the application's (give an executor of your own to bound them). The futures
 * complete on that thread: chain heavy work with the {@code *Async} methods of
 * CompletableFuture and an executor of yours.
 *
 * <p><b>Cancelling.</b> {@code cancel(true)} on a future not done yet interrupts its call: an
 * acquisition waiting in the server's queue leaves it (relock closes the wait's connection), and
 * what it may have been granted meanwhile is given back, as for an interrupted
 * {@link Relock#acquire}.
 */
public final class RelockAsync implements AutoCloseable {
    private final Relock relock;
    private final ExecutorService executor;
    private final boolean ownExecutor;

    private RelockAsync(Relock relock, ExecutorService executor, boolean own) {
        this.relock = relock;
        this.executor = executor;
        this.ownExecutor = own;
    }

    /** On an executor of its own (daemon platform threads, made as needed). */
    public static RelockAsync of(Relock relock) {
        AtomicInteger n = new AtomicInteger();
        return new RelockAsync(relock, Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "relock-async-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        }), true);
    }

    /** On the given executor (not shut down by {@link #close}). */
    public static RelockAsync of(Relock relock, ExecutorService executor) {
        return new RelockAsync(relock, executor, false);
    }

    /** A future whose cancel(true) interrupts the thread running its call. */
    private static final class Call<T> extends CompletableFuture<T> {
        /** the thread running the call, under the future's lock (an interrupt never outlives it). */
        Thread runner;

        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            boolean done = super.cancel(mayInterruptIfRunning);
            synchronized (this) {
                if (done && runner != null) {
                    runner.interrupt();
                }
            }
            return done;
        }
    }

    private <T> CompletableFuture<T> run(Supplier<T> call) {
        return run(call, null);
    }

    /** unwanted gets a value that came after the future was cancelled (nobody else will see it). */
    private <T> CompletableFuture<T> run(Supplier<T> call, java.util.function.Consumer<T> unwanted) {
        Call<T> f = new Call<>();
        try {
            executor.execute(() -> {
                synchronized (f) {
                    if (f.isDone()) {
                        return; // cancelled before it started
                    }
                    f.runner = Thread.currentThread();
                }
                try {
                    T v = call.get();
                    if (!f.complete(v) && unwanted != null && v != null) {
                        unwanted.accept(v);
                    }
                } catch (Throwable e) {
                    f.completeExceptionally(e);
                } finally {
                    synchronized (f) {
                        f.runner = null;
                        Thread.interrupted(); // a cancel's interrupt stays with this call
                    }
                }
            });
        } catch (RejectedExecutionException e) {
            f.completeExceptionally(e);
        }
        return f;
    }

    /** {@link Relock#acquire}: completes with the hold, or exceptionally (NotAcquiredException, ...). */
    public CompletableFuture<Hold> acquireAsync(String key, LockOptions options) {
        // granted as it was cancelled: nobody would release it
        return run(() -> relock.acquire(key, options), RelockAsync::giveBack);
    }

    /** {@link Relock#tryAcquire}. */
    public CompletableFuture<Optional<Hold>> tryAcquireAsync(String key, LockOptions options) {
        return run(() -> relock.tryAcquire(key, options), o -> o.ifPresent(RelockAsync::giveBack));
    }

    /** {@link Relock#acquireAll}. */
    public CompletableFuture<Hold> acquireAllAsync(List<String> keys, LockOptions options) {
        return run(() -> relock.acquireAll(keys, options), RelockAsync::giveBack);
    }

    /** {@link Relock#campaign}. */
    public CompletableFuture<Leadership> campaignAsync(String key, String value, LockOptions options) {
        return run(() -> relock.campaign(key, value, options), l -> {
            try {
                l.resign();
            } catch (RuntimeException e) {
                // its ttl ends it
            }
        });
    }

    private static void giveBack(Hold h) {
        try {
            h.release();
        } catch (RuntimeException e) {
            // lost already, or the server unreachable: its ttl ends it
        }
    }

    /** {@link Hold#release}. */
    public CompletableFuture<Void> releaseAsync(Hold hold) {
        return run(() -> {
            hold.release();
            return null;
        });
    }

    /** {@link Hold#renew}. */
    public CompletableFuture<Void> renewAsync(Hold hold) {
        return run(() -> {
            hold.renew();
            return null;
        });
    }

    /** {@link Hold#fenced}: sent at most once, as the blocking call. */
    public CompletableFuture<Object> fencedAsync(Hold hold, Object... command) {
        return run(() -> hold.fenced(command));
    }

    /** The Relock the calls go to. */
    public Relock relock() {
        return relock;
    }

    /** Shuts down its own executor (not the Relock, not an executor given to it). */
    @Override
    public void close() {
        if (ownExecutor) {
            executor.shutdownNow();
        }
    }
}
