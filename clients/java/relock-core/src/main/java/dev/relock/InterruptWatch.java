package dev.relock;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * Cuts the blocking calls of platform threads interrupted while they wait: a thread blocked in a
 * socket read does not see {@link Thread#interrupt()}, so one task of relock's timer looks at
 * every watched thread every {@link #POLL_MS} ms, while any is watched, and cuts the calls of one
 * that was interrupted (its connection closes: the server drops the waiter).
 */
final class InterruptWatch {
    static final long POLL_MS = 10;

    private static final Map<Relock.OpenCalls, Thread> WATCHED = new ConcurrentHashMap<>();
    private static ScheduledFuture<?> task; // guarded by InterruptWatch.class
    private static final MethodHandle IS_VIRTUAL = isVirtualHandle();

    private InterruptWatch() {}

    /** Thread.isVirtual() where the JVM has it (Java 21+); null on Java 17. */
    private static MethodHandle isVirtualHandle() {
        try {
            return MethodHandles.publicLookup().findVirtual(Thread.class, "isVirtual", MethodType.methodType(boolean.class));
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    /**
     * Whether t is a virtual thread. Those keep asking through relock's own threads: a
     * blocking read in a virtual thread may pin its carrier (inside a driver's synchronized
     * code, on Java 21 to 23), and a few waits would then stop every virtual thread.
     */
    static boolean isVirtual(Thread t) {
        if (IS_VIRTUAL == null) {
            return false;
        }
        try {
            return (boolean) IS_VIRTUAL.invoke(t);
        } catch (Throwable e) {
            return false;
        }
    }

    /** Watches the calls of thread t until the returned handle is closed. */
    static Runnable watch(Thread t, Relock.OpenCalls calls) {
        WATCHED.put(calls, t);
        synchronized (InterruptWatch.class) {
            if (task == null) {
                task = Relock.TIMER.scheduleWithFixedDelay(InterruptWatch::tick, POLL_MS, POLL_MS, TimeUnit.MILLISECONDS);
            }
        }
        return () -> WATCHED.remove(calls);
    }

    private static void tick() {
        for (Map.Entry<Relock.OpenCalls, Thread> e : WATCHED.entrySet()) {
            try {
                if (e.getValue().isInterrupted()) {
                    e.getKey().cutAll();
                }
            } catch (Throwable t) {
                // A transport's abort() that throws must not end this task: a periodic task
                // that throws is never run again, and no wait in the process would be cut by
                // an interrupt after it.
            }
        }
        synchronized (InterruptWatch.class) {
            // Stops while nothing is watched; watch() starts it again (under the same lock, so
            // a call watched meanwhile is never left without the task).
            if (WATCHED.isEmpty() && task != null) {
                task.cancel(false);
                task = null;
            }
        }
    }
}
