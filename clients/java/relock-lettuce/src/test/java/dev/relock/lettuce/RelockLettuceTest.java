package dev.relock.lettuce;

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
import dev.relock.ReplyError;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
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
import dev.relock.testing.BehaviourCases;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import dev.relock.Transport;
import dev.relock.TransportException;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.protocol.ProtocolVersion;

/** The behaviour cases the other clients have, on one real server through Lettuce. */
class RelockLettuceTest extends BehaviourCases<RedisServer> {
    @Override
    protected RedisServer server() throws Exception {
        return new RedisServer();
    }

    @Override
    protected Relock open(RedisServer s) {
        return RelockLettuce.create(s.uri());
    }

    @Test
    void repliesDecodeUnderResp2AndResp3() {
        for (ProtocolVersion protocol : List.of(ProtocolVersion.RESP2, ProtocolVersion.RESP3)) {
            try (Relock r = RelockLettuce.create(srv.uri(), ClientOptions.builder().protocolVersion(protocol).build(), Relock.Settings.defaults())) {
                Hold h = r.acquire(k, ttl(10_000));
                Info info = r.info(k).orElseThrow();
                assertEquals(h.owner(), info.owner(), protocol.name());
                assertEquals(h.token(), info.token(), protocol.name());
                assertEquals(1, r.holders(k, 0).size());
                assertEquals(1L, srv.cmd("LOCK.FORCERELEASE", k));
                assertEquals("forcereleased", r.history(k, 10).get(0).reason(), protocol.name());
                assertEquals(List.of(r.servers().get(0)), r.stats(10).stream().map(st -> st.server()).distinct().toList(), protocol.name());
            }
        }
    }

    @Test
    void aWaitIsNotCutByTheDriversCommandTimeout() throws Exception {
        // The application's client has a 200 ms command timeout (URI and TimeoutOptions): relock's
        // waits must not use it.
        RedisURI shortUri = RedisURI.builder(srv.uri()).withTimeout(ofMillis(200)).build();
        RedisClient app = RedisClient.create(shortUri);
        app.setOptions(ClientOptions.builder().timeoutOptions(TimeoutOptions.enabled(ofMillis(200))).build());
        try (Relock shortTimeout = RelockLettuce.create(app)) {
            Hold h = locks.acquire(k, ttl(10_000));
            Future<Hold> waiter = pool.submit(() -> shortTimeout.acquire(k, ttl(10_000).waitAtMost(ofSeconds(10))));
            eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 1);
            long client = locks.waiters(k, 0).get(0).client();
            Thread.sleep(700); // marked: more than three of the driver's command timeouts pass
            assertEquals(List.of(client), locks.waiters(k, 0).stream().map(w -> w.client()).toList(),
                "the same connection still waits, never cut and queued again");
            h.release();
            waiter.get(30, TimeUnit.SECONDS).release();
        } finally {
            app.shutdown();
        }
    }

    /**
     * Lettuce shuts an event loop group down when its count of users falls to 0 (the last
     * client closed), and a client allocating it meanwhile (one Relock closed while another
     * opened) kept a group being shut down: every connect failed with "event executor
     * terminated", and lock() waited for ever (the Java suite hung once, 2026-12-05). relock
     * keeps a reference of its own to the event loops it shares: closing every transport
     * leaves them running.
     */
    @Test
    void closingEveryTransportLeavesTheSharedEventLoopsRunning() throws Exception {
        io.lettuce.core.resource.EventLoopGroupProvider provider = LettuceTransport.sharedResources().eventLoopGroupProvider();
        Class<? extends io.netty.channel.EventLoopGroup> type = io.lettuce.core.resource.Transports.eventLoopGroupClass();
        io.netty.channel.EventLoopGroup group = provider.allocate(type);
        provider.release(group, 0, 2, TimeUnit.SECONDS).get(5, TimeUnit.SECONDS);
        for (int i = 0; i < 3; i++) {
            try (Relock r = RelockLettuce.create(srv.uri())) {
                r.acquire(k, ttl(10_000)).release();
            }
        }
        locks.close(); // the test's own client too (closing it twice is harmless)
        Thread.sleep(2500); // marked: the closed clients' event loops released (their 2 s bound)
        assertFalse(group.isShuttingDown(), "the shared event loops were shut down with the last transport");
        io.netty.channel.EventLoopGroup again = provider.allocate(type);
        try {
            assertTrue(again == group, "a new transport is handed the same running event loops");
        } finally {
            provider.release(again, 0, 2, TimeUnit.SECONDS);
        }
        try (Relock r = RelockLettuce.create(srv.uri())) {
            r.acquire(k, ttl(10_000)).release();
        }
    }

    @Test
    void aBlockingCallOnAKilledConnectionIsNeverSentAgain() throws Exception {
        // Lettuce's auto-reconnect would reconnect and re-send the queued BLPOP, which would
        // then take the element pushed later: relock's connections do not reconnect.
        try (LettuceTransport t = LettuceTransport.server(srv.uri(), ClientOptions.builder().autoReconnect(true).build())) {
            Transport.Connection c = t.dedicated(k);
            Future<Object> blocked = pool.submit(() -> c.call(null, "BLPOP", k + ":q", 0));
            eventually(ofSeconds(20), () -> String.valueOf(srv.cmd("CLIENT", "LIST")).toLowerCase().contains("cmd=blpop"));
            srv.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
            ExecutionException e = assertThrows(ExecutionException.class, () -> blocked.get(30, TimeUnit.SECONDS));
            TransportException te = assertInstanceOf(TransportException.class, e.getCause());
            assertTrue(te.sent(), "a command that was written may have run");
            c.close();
            Thread.sleep(500); // marked: room for a reconnect and a re-send, were there one
            assertFalse(String.valueOf(srv.cmd("CLIENT", "LIST")).toLowerCase().contains("cmd=blpop"), "the BLPOP was sent again");
            assertEquals(1L, srv.cmd("RPUSH", k + ":q", "x"));
            assertEquals(1L, srv.cmd("LLEN", k + ":q"), "nothing took the element");
        }
    }

    /**
     * lock() is uninterruptible: it retries. An interrupt used to cut a connect, leaving it
     * pending, and the retry started another (and gave back, in the background, what the cut
     * attempt might hold, which connected again): an interrupt storm against a server slow to
     * answer the handshake (a loaded machine, a paused server) opened about 500 connections a
     * second; in a loaded make test the JVM ran out of file descriptors. A connect is now not
     * cut by an interrupt, as a socket's connect (Jedis) is not.
     */
    @Test
    void interruptsDuringConnectsDoNotOpenConnectionsWithoutBound() throws Exception {
        java.util.concurrent.atomic.AtomicInteger accepted = new java.util.concurrent.atomic.AtomicInteger();
        List<java.net.Socket> held = new CopyOnWriteArrayList<>();
        try (java.net.ServerSocket silent = new java.net.ServerSocket(0, 4096, java.net.InetAddress.getLoopbackAddress())) {
            Thread acceptor = new Thread(() -> {
                while (!silent.isClosed()) {
                    try {
                        held.add(silent.accept()); // accepted, never answered: the handshake hangs
                        accepted.incrementAndGet();
                    } catch (java.io.IOException e) {
                        return;
                    }
                }
            }, "silent-acceptor");
            acceptor.start();
            Relock r = RelockLettuce.create(RedisURI.create("redis://127.0.0.1:" + silent.getLocalPort()));
            RelockLock l = r.lock(k, ofSeconds(30));
            java.util.concurrent.atomic.AtomicReference<Throwable> ended = new java.util.concurrent.atomic.AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    l.lock();
                    ended.set(new AssertionError("lock() returned on a server that never answers"));
                } catch (Throwable e) {
                    ended.set(e);
                }
            }, "uninterruptible");
            t.start();
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
            while (System.nanoTime() < until) {
                t.interrupt();
                java.util.concurrent.locks.LockSupport.parkNanos(300_000);
            }
            int opened = accepted.get();
            assertTrue(opened >= 1, "the connect was tried");
            assertTrue(opened <= 3, opened + " connections opened for one thread's lock() under interrupts");
            r.close();
            t.join(30_000);
            assertFalse(t.isAlive(), "lock() still runs after close()");
            assertFalse(ended.get() instanceof AssertionError, String.valueOf(ended.get()));
            assertTrue(String.valueOf(ended.get().getMessage()).contains("closed"), String.valueOf(ended.get()));
            acceptor.interrupt();
        } finally {
            for (java.net.Socket s : held) {
                s.close();
            }
        }
    }

    /**
     * A connect past its caller's bound is taken up by the next call to that server, not left
     * to close when it comes while the next call starts another: calls retried against a server
     * slow to answer the handshake piled up connects.
     */
    @Test
    void aConnectPastItsBoundIsTakenUpByTheNextCall() throws Exception {
        java.util.concurrent.atomic.AtomicInteger accepted = new java.util.concurrent.atomic.AtomicInteger();
        List<java.net.Socket> held = new CopyOnWriteArrayList<>();
        try (java.net.ServerSocket silent = new java.net.ServerSocket(0, 64, java.net.InetAddress.getLoopbackAddress());
             LettuceTransport t = LettuceTransport.server(RedisURI.create("redis://127.0.0.1:" + silent.getLocalPort()), null)) {
            Thread acceptor = new Thread(() -> {
                while (!silent.isClosed()) {
                    try {
                        held.add(silent.accept());
                        accepted.incrementAndGet();
                    } catch (java.io.IOException e) {
                        return;
                    }
                }
            }, "silent-acceptor");
            acceptor.start();
            for (int i = 0; i < 3; i++) {
                TransportException te = assertThrows(TransportException.class, () -> t.call(k, ofMillis(100), "PING"));
                assertTrue(te.timeout() && !te.sent(), te.getMessage());
            }
            assertEquals(1, accepted.get(), "one connect, taken up by each call in turn");
            // The queued connect fails (its socket closed by the server): it leaves the queue, so
            // the next call connects anew instead of being handed that old failure at once.
            held.get(0).close();
            eventually(ofSeconds(20), () -> queuedConnects(t) == 0);
            TransportException te = assertThrows(TransportException.class, () -> t.call(k, ofMillis(100), "PING"));
            assertTrue(te.timeout(), "a new connect, past its bound: " + te.getMessage());
            assertEquals(2, accepted.get(), "a second connect");
        } finally {
            for (java.net.Socket s : held) {
                s.close();
            }
        }
    }

    /** How many of the transport's connects wait to be taken up (guarded by its idle pool). */
    private static int queuedConnects(LettuceTransport t) {
        try {
            java.lang.reflect.Field idle = LettuceTransport.class.getDeclaredField("idle");
            java.lang.reflect.Field connecting = LettuceTransport.class.getDeclaredField("connecting");
            idle.setAccessible(true);
            connecting.setAccessible(true);
            synchronized (idle.get(t)) {
                return ((Map<?, ? extends java.util.Collection<?>>) connecting.get(t)).values().stream().mapToInt(java.util.Collection::size).sum();
            }
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void abortFromAnotherThreadCutsAWaitWithoutABound() throws Exception {
        try (LettuceTransport t = LettuceTransport.server(srv.uri(), null)) {
            Transport.Connection c = t.dedicated(k);
            Future<Object> blocked = pool.submit(() -> c.call(null, "BLPOP", k + ":q", 0));
            eventually(ofSeconds(20), () -> String.valueOf(srv.cmd("CLIENT", "LIST")).toLowerCase().contains("cmd=blpop"));
            long t0 = System.nanoTime();
            c.abort();
            ExecutionException e = assertThrows(ExecutionException.class, () -> blocked.get(30, TimeUnit.SECONDS));
            assertTrue(assertInstanceOf(TransportException.class, e.getCause()).sent());
            assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 3000);
            c.close();
            eventually(ofSeconds(20), () -> !String.valueOf(srv.cmd("CLIENT", "LIST")).toLowerCase().contains("cmd=blpop"));
            // A bounded call past its bound: a timeout, and the connection is not kept.
            Transport.Connection d = t.dedicated(k);
            TransportException te = assertThrows(TransportException.class, () -> d.call(ofMillis(200), "BLPOP", k + ":q", 0));
            assertTrue(te.sent() && te.timeout(), te.getMessage());
            d.close();
            eventually(ofSeconds(20), () -> !String.valueOf(srv.cmd("CLIENT", "LIST")).toLowerCase().contains("cmd=blpop"));
        }
    }

    @Test
    void errorRepliesAndPipelines() {
        try (LettuceTransport t = LettuceTransport.server(srv.uri(), null)) {
            ReplyError e = assertThrows(ReplyError.class, () -> t.call(k, ofSeconds(2), "LOCK.ACQUIRE", k));
            assertEquals("ERR", e.code(), e.text());
            try (Transport.Connection c = t.dedicated(k)) {
                List<Object> rs = c.pipeline(ofSeconds(2), List.of(new Object[] {"SET", k + ":s", "v"}, new Object[] {"INCR", k + ":s"},
                    new Object[] {"GET", k + ":s"}));
                assertEquals("OK", rs.get(0));
                assertInstanceOf(ReplyError.class, rs.get(1));
                assertEquals("v", rs.get(2));
                assertEquals(List.of("a", List.of(), List.of("b", 2L)), c.call(ofSeconds(2), "EVAL",
                    "return {'a', {}, {'b', 2}}", 0));
            }
            TransportException down = assertThrows(TransportException.class, () -> {
                try (LettuceTransport none = LettuceTransport.server(RedisURI.create("127.0.0.1", freePortNobodyListensOn()), null)) {
                    none.call(k, ofSeconds(1), "PING");
                }
            });
            assertFalse(down.sent(), "nothing was sent when the connection could not be opened");
        }
    }

    static int freePortNobodyListensOn() throws java.io.IOException {
        return RedisServer.freePort();
    }
}
