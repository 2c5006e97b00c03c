package dev.relock;

import java.time.Duration;
import java.util.List;

/**
 * What relock needs of a Redis driver: one adapter per driver (relock-jedis, relock-lettuce)
 * implements it, and the core ({@link Relock}) holds every rule. A transport is one server, or
 * one Redis Cluster (routed by key). Redlock is several transports, one per independent master.
 *
 * <p><b>Values.</b> Arguments are {@code String} (sent as UTF-8), {@code byte[]}, or an integral
 * {@code Number} (sent as its decimal text). Replies are given as: {@code null} (nil), {@code Long}
 * (integer), {@code String} (bulk or simple string, UTF-8), {@code Double}, {@code Boolean},
 * {@code List<Object>} (array, set, push) and {@code Map<Object,Object>} (a RESP3 map, in order);
 * an error inside an array is a {@link ReplyError} element.
 *
 * <p><b>Failures.</b> An error reply is thrown as {@link ReplyError} (its text without the '-').
 * Anything else is a {@link TransportException} whose {@link TransportException#sent()} tells
 * "nothing was sent" (a connection that could not be opened or borrowed: the command certainly
 * did not run) from "may have run" (any byte may have left: a timeout, a reset, a closed
 * connection).
 *
 * <p><b>No driver decides for relock.</b> A transport never re-sends a command by itself (no
 * driver retries, no re-send after a reconnect, no following of MOVED/ASK except where a method
 * says so) and no driver timeout cuts a call before the bound relock gives.
 */
public interface Transport extends AutoCloseable {

    /** The server's address ({@code host:port}), or {@code cluster[host:port,...]}. */
    String name();

    /** Whether this is a Redis Cluster (MOVED and ASK are then redirections, not failures). */
    boolean isCluster();

    /**
     * One command on the server that serves {@code key} (its master in a cluster; {@code key}
     * null: any server), answered within {@code timeout} or failed with a
     * {@link TransportException} (sent true: it may have run). In a cluster a MOVED or ASK
     * refusal (the command did not run) may be followed once; nothing else is re-sent.
     */
    Object call(String key, Duration timeout, Object... args);

    /**
     * A connection of its own to the server that serves {@code key} (its master in a cluster),
     * for blocking commands (LOCK.WAIT, LOCK.OBSERVE) and for a write followed by WAIT on the
     * same connection. An idle one kept from an earlier call, or a new one. Throws a
     * {@link TransportException} with sent false when it cannot be opened.
     */
    Connection dedicated(String key);

    /**
     * The command sent at most once ("send once", spec/client-cases/README.md): for
     * LOCK.FENCED. Once any byte may have left, it is never sent again, to any server; a lost
     * reply is a {@link TransportException} with sent true. In a cluster only a refusal that
     * proves nothing ran (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, READONLY, MASTERDOWN) may send it
     * on, to the master named or found for the key.
     */
    Object callOnce(String key, Duration timeout, Object... args);

    /**
     * One command on every master (one server: itself; a cluster: each master), for commands
     * without a key (LOCK.LOG, LOCK.STATS): the replies in a stable order.
     */
    List<Object> callEachMaster(Duration timeout, Object... args);

    /** Closes relock's own connections (never the application's driver objects). */
    @Override
    void close();

    /**
     * One connection, used by one thread at a time (except {@link #abort()}).
     */
    interface Connection extends AutoCloseable {
        /** The address of the server it is connected to ({@code host:port}). */
        String address();

        /**
         * One command, with no driver read timeout: {@code bound} (null: none) is the only
         * limit; past it a {@link TransportException} (sent true) is thrown and the
         * connection is not kept. relock calls it from its own threads and, when the caller
         * is interrupted or the round no longer needs the answer, calls {@link #abort()}.
         */
        Object call(Duration bound, Object... args);

        /**
         * Several commands written together (one pipeline, in order) and their replies in
         * order; an error reply is a {@link ReplyError} element of the list, not thrown.
         * {@code bound} as for {@link #call}. For a write and its {@code WAIT n timeout}.
         */
        List<Object> pipeline(Duration bound, List<Object[]> commands);

        /** From any thread: closes the socket; a call under way fails (sent true). */
        void abort();

        /**
         * Gives the connection back: kept for the next {@link Transport#dedicated} when whole
         * (its last call answered), closed otherwise.
         */
        @Override
        void close();
    }
}
