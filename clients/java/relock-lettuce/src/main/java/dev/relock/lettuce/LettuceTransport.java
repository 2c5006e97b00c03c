package dev.relock.lettuce;

import dev.relock.ReplyError;
import dev.relock.Transport;
import dev.relock.TransportException;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.MaintNotificationsConfig;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.protocol.AsyncCommand;
import io.lettuce.core.protocol.Command;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import io.lettuce.core.resource.Transports;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * relock's {@link Transport} on Lettuce: one server, or a Redis Cluster routed by key.
 *
 * <p>relock never sends its commands on the application's Lettuce connections (whose
 * auto-reconnect re-sends the commands queued when a connection dropped, and whose command
 * timeout would cut a blocking LOCK.WAIT): it opens connections of its own, with the
 * application's {@link RedisURI} (user, password, TLS, database, client name) and
 * {@link ClientOptions} changed in four ways: no auto-reconnect (a dropped connection stays
 * closed and the commands on it fail: nothing is ever re-sent), commands rejected while
 * disconnected (never queued), no command timeout (relock bounds each call itself, and gives
 * a blocking call no bound at all when it has none), no maintenance notifications (which relax
 * timeouts and move connections). A connection whose call did not answer within its bound is
 * closed, never reused. In a cluster relock keeps its own slot map (CLUSTER SLOTS) and follows
 * a MOVED or ASK refusal once (the command did not run there).
 */
public final class LettuceTransport implements Transport {
    private static final int MAX_IDLE = 16;
    private static final long CONNECT_FLOOR_MS = 1000;
    private static volatile ClientResources shared;

    /**
     * Event loops of relock's own, shared by the transports made without the application's,
     * for the life of the process (daemon threads). relock keeps a reference to their event
     * loop group of its own: Lettuce counts a group's users and shuts it down when the count
     * falls to 0 (the last transport closed), and a client that allocated it meanwhile (one
     * transport closed while another opened: the release is not atomic with an allocation)
     * kept a group that was being shut down, so that every connect it made failed with "event
     * executor terminated" for ever (and lock() waited for ever: seen in the Java suite).
     */
    static ClientResources sharedResources() {
        ClientResources r = shared;
        if (r == null) {
            synchronized (LettuceTransport.class) {
                r = shared;
                if (r == null) {
                    r = DefaultClientResources.builder().ioThreadPoolSize(2).computationThreadPoolSize(2).build();
                    r.eventLoopGroupProvider().allocate(Transports.eventLoopGroupClass());
                    shared = r;
                }
            }
        }
        return r;
    }

    /** A host and port. */
    record Addr(String host, int port) {
        static Addr parse(String hostPort) {
            int i = hostPort.lastIndexOf(':');
            return new Addr(hostPort.substring(0, i), Integer.parseInt(hostPort.substring(i + 1)));
        }

        @Override
        public String toString() {
            return host + ":" + port;
        }
    }

    private final RedisClient client;
    private final RedisURI base;
    private final boolean cluster;
    private final String name;
    private final Addr single;
    private final Set<Addr> seeds;
    /** the cluster's master of each slot, or null before the first load. */
    private volatile Addr[] slots;
    private final Map<Addr, ArrayDeque<StatefulRedisConnection<byte[], byte[]>>> idle = new HashMap<>();
    /**
     * Connects whose caller stopped waiting (past its bound) while they were still under way, by
     * server; guarded by idle. The next open to that server takes one up instead of starting
     * another, and one that completes untaken goes to the idle pool. Closing each when it came
     * let retries against a server slow to answer the handshake pile up connects; a new connect
     * starts only when none is waiting to be taken up, so the connects under way are never more
     * than the threads opening at once.
     */
    private final Map<Addr, ArrayDeque<CompletableFuture<StatefulRedisConnection<byte[], byte[]>>>> connecting = new HashMap<>();
    private volatile boolean closed;
    private final Duration connectTimeout;

    private LettuceTransport(RedisURI single, Collection<RedisURI> seeds, ClientOptions options, ClientResources resources) {
        this.base = single != null ? single : seeds.iterator().next();
        this.single = single != null ? new Addr(single.getHost(), single.getPort()) : null;
        this.cluster = single == null;
        this.seeds = new LinkedHashSet<>();
        if (seeds != null) {
            for (RedisURI u : seeds) {
                this.seeds.add(new Addr(u.getHost(), u.getPort()));
            }
        }
        if (cluster) {
            List<String> n = new ArrayList<>();
            for (Addr a : this.seeds) {
                n.add(a.toString());
            }
            this.name = "cluster[" + String.join(",", n) + "]";
        } else {
            this.name = this.single.toString();
        }
        this.client = RedisClient.create(resources != null ? resources : sharedResources());
        ClientOptions own = relockOptions(options);
        this.client.setOptions(own);
        this.connectTimeout = own.getSocketOptions().getConnectTimeout();
    }

    /**
     * The application's options as relock's connections need them: no auto-reconnect (no
     * re-send), commands rejected while disconnected, no command timeout, no maintenance
     * notifications.
     */
    static ClientOptions relockOptions(ClientOptions app) {
        ClientOptions from = app == null ? ClientOptions.create() : ClientOptions.copyOf(app);
        return from.mutate()
            .autoReconnect(false)
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .timeoutOptions(TimeoutOptions.builder().timeoutCommands(false).build())
            .maintNotificationsConfig(MaintNotificationsConfig.disabled())
            .build();
    }

    /** One server at uri (its credentials, TLS, database), with the application's options (null: defaults). */
    public static LettuceTransport server(RedisURI uri, ClientOptions options, ClientResources resources) {
        return new LettuceTransport(uri, null, options, resources);
    }

    public static LettuceTransport server(RedisURI uri, ClientOptions options) {
        return server(uri, options, null);
    }

    /** A Redis Cluster known by some of its nodes (credentials and TLS of the first one apply to every node). */
    public static LettuceTransport cluster(Collection<RedisURI> seeds, ClientOptions options, ClientResources resources) {
        if (seeds.isEmpty()) {
            throw new IllegalArgumentException("a cluster needs at least one node's address");
        }
        return new LettuceTransport(null, seeds, options, resources);
    }

    public static LettuceTransport cluster(Collection<RedisURI> seeds, ClientOptions options) {
        return cluster(seeds, options, null);
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public boolean isCluster() {
        return cluster;
    }

    // --- connections ---------------------------------------------------------------------

    private RedisURI uriOf(Addr at) {
        if (!cluster) {
            return base;
        }
        return RedisURI.builder(base).withHost(at.host()).withPort(at.port()).build();
    }

    /**
     * An idle connection to at, or a new one opened within bound (at least a second; null: the
     * options' connect timeout, as at most): a server that accepts but does not answer the handshake (paused) must not hold
     * the call past its bound. Nothing was sent when this fails.
     */
    private StatefulRedisConnection<byte[], byte[]> open(Addr at, Duration bound) {
        if (closed) {
            throw new TransportException("the relock transport was closed", false, false, null);
        }
        CompletableFuture<StatefulRedisConnection<byte[], byte[]>> f = null;
        synchronized (idle) {
            ArrayDeque<StatefulRedisConnection<byte[], byte[]>> q = idle.get(at);
            while (q != null && !q.isEmpty()) {
                StatefulRedisConnection<byte[], byte[]> c = q.pollLast();
                if (c.isOpen()) {
                    return c;
                }
                c.closeAsync();
            }
            ArrayDeque<CompletableFuture<StatefulRedisConnection<byte[], byte[]>>> pending = connecting.get(at);
            if (pending != null) {
                f = pending.pollFirst();
            }
        }
        // A new connection (TCP, TLS, HELLO) may take longer than one command: at least a second.
        long ms = Math.max(1, Math.min(connectTimeout.toMillis(), bound == null ? Long.MAX_VALUE : Math.max(CONNECT_FLOOR_MS, bound.toMillis())));
        if (f == null) {
            try {
                f = client.connectAsync(ByteArrayCodec.INSTANCE, uriOf(at)).toCompletableFuture();
            } catch (RuntimeException e) {
                throw new TransportException(at + ": cannot connect: " + e.getMessage(), false, false, e);
            }
            CompletableFuture<StatefulRedisConnection<byte[], byte[]>> mine = f;
            f.whenComplete((c, e) -> {
                // Came after its caller left, and nobody took it up: pooled if it connected,
                // forgotten if it failed (else the next call would be handed its old failure).
                if (untake(at, mine) && c != null) {
                    keep(at, c);
                }
            });
        }
        // An interrupt does not cut a connect (a socket's connect, as Jedis's, does not see one
        // either): it is kept for the command that follows, which the interrupt watch cuts.
        // Cutting it made every retry of lock() under interrupts start a connect of its own.
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return f.get(Math.max(0, until - System.nanoTime()), TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } catch (ExecutionException e) {
            Throwable c = e.getCause() != null ? e.getCause() : e;
            throw new TransportException(at + ": cannot connect: " + c.getMessage(), false, false, c);
        } catch (TimeoutException e) {
            leave(at, f);
            throw new TransportException(at + ": not connected within " + ms + " ms", false, true, e);
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** A connect its caller no longer waits for: the next open to at takes it up. */
    private void leave(Addr at, CompletableFuture<StatefulRedisConnection<byte[], byte[]>> f) {
        synchronized (idle) {
            if (!closed && !f.isDone()) {
                connecting.computeIfAbsent(at, k -> new ArrayDeque<>()).addLast(f);
                return;
            }
        }
        // Done meanwhile (its completion found it taken by this caller), or closed: pooled or closed now.
        f.thenAccept(c -> keep(at, c));
    }

    /** Whether f was waiting to be taken up (it is not any more). */
    private boolean untake(Addr at, CompletableFuture<StatefulRedisConnection<byte[], byte[]>> f) {
        synchronized (idle) {
            ArrayDeque<CompletableFuture<StatefulRedisConnection<byte[], byte[]>>> pending = connecting.get(at);
            return pending != null && pending.remove(f);
        }
    }

    private void keep(Addr at, StatefulRedisConnection<byte[], byte[]> c) {
        synchronized (idle) {
            if (!closed && c.isOpen()) {
                ArrayDeque<StatefulRedisConnection<byte[], byte[]>> q = idle.computeIfAbsent(at, k -> new ArrayDeque<>());
                if (q.size() < MAX_IDLE) {
                    q.addLast(c);
                    return;
                }
            }
        }
        drop(c);
    }

    private static void drop(StatefulRedisConnection<byte[], byte[]> c) {
        try {
            c.closeAsync();
        } catch (RuntimeException e) {
            // already gone
        }
    }

    private record Keyword(String text, byte[] raw) implements ProtocolKeyword {
        @Override
        public byte[] getBytes() {
            return raw;
        }

        @Override
        public String toString() {
            return text;
        }
    }

    private static final Map<String, Keyword> COMMANDS = new ConcurrentHashMap<>();

    static AsyncCommand<byte[], byte[], Object> command(Object[] args) {
        if (args.length == 0) {
            throw new IllegalArgumentException("no command");
        }
        Keyword kw = COMMANDS.computeIfAbsent(String.valueOf(args[0]), n -> new Keyword(n, n.getBytes(StandardCharsets.UTF_8)));
        CommandArgs<byte[], byte[]> a = new CommandArgs<>(ByteArrayCodec.INSTANCE);
        for (int i = 1; i < args.length; i++) {
            Object x = args[i];
            if (x instanceof byte[] b) {
                a.add(b);
            } else if (x instanceof Long || x instanceof Integer || x instanceof Short || x instanceof Byte) {
                a.add(((Number) x).longValue());
            } else {
                a.add(String.valueOf(x).getBytes(StandardCharsets.UTF_8));
            }
        }
        return new AsyncCommand<>(new Command<>(kw, new RawOutput(), a));
    }

    /** A reply's failure: an error reply (the command answered), or a lost reply. */
    private static RuntimeException failure(Addr at, Throwable e, boolean cut) {
        Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        if (c instanceof RedisCommandExecutionException x && !cut) {
            return new ReplyError(x.getMessage());
        }
        return new TransportException(at + ": " + (cut ? "cut by relock" : String.valueOf(c.getMessage())), true, false, c);
    }

    /**
     * Writes commands on c (one write) and waits for every reply within bound (null: none).
     * Returns the replies (an error reply as a {@link ReplyError} element); throws a
     * {@link TransportException} when a reply did not come. inFlight (may be null) gets the
     * commands, so that an abort can fail them at once.
     */
    static List<Object> exchange(Addr at, StatefulRedisConnection<byte[], byte[]> c, Duration bound, List<Object[]> commands,
                                 List<AsyncCommand<byte[], byte[], Object>> inFlight, java.util.function.BooleanSupplier cut) {
        List<AsyncCommand<byte[], byte[], Object>> cmds = new ArrayList<>(commands.size());
        for (Object[] args : commands) {
            cmds.add(command(args));
        }
        if (inFlight != null) {
            inFlight.addAll(cmds);
        }
        if (cut.getAsBoolean()) {
            throw new TransportException(at + ": cut by relock", true, false, null);
        }
        if (cmds.size() == 1) {
            c.dispatch(cmds.get(0));
        } else {
            c.dispatch(cmds);
        }
        long until = bound == null ? 0 : System.nanoTime() + bound.toNanos();
        List<Object> out = new ArrayList<>(cmds.size());
        for (AsyncCommand<byte[], byte[], Object> cmd : cmds) {
            try {
                Object v;
                if (bound == null) {
                    v = cmd.get();
                } else {
                    v = cmd.get(Math.max(0, until - System.nanoTime()), TimeUnit.NANOSECONDS);
                }
                out.add(v);
            } catch (ExecutionException e) {
                RuntimeException f = failure(at, e, cut.getAsBoolean());
                if (f instanceof ReplyError re) {
                    out.add(re);
                } else {
                    throw f;
                }
            } catch (CancellationException e) {
                throw new TransportException(at + ": " + (cut.getAsBoolean() ? "cut by relock" : "the connection closed"), true, false, e);
            } catch (TimeoutException e) {
                throw new TransportException(at + ": no reply within " + bound.toMillis() + " ms", true, true, e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new TransportException(at + ": interrupted", true, false, e);
            }
        }
        return out;
    }

    /** One command (or several) on a connection of the pool; given back when whole, else closed. */
    private List<Object> exec(Addr at, Duration timeout, List<Object[]> commands) {
        StatefulRedisConnection<byte[], byte[]> c = open(at, timeout);
        boolean whole = false;
        try {
            List<Object> out = exchange(at, c, timeout, commands, null, () -> false);
            whole = true;
            return out;
        } catch (RedisException e) {
            throw new TransportException(at + ": " + e.getMessage(), true, false, e);
        } finally {
            if (whole) {
                keep(at, c);
            } else {
                drop(c);
            }
        }
    }

    private Object execOne(Addr at, Duration timeout, Object[] args) {
        Object v = exec(at, timeout, List.<Object[]>of(args)).get(0);
        if (v instanceof ReplyError e) {
            throw e;
        }
        return v;
    }

    // --- cluster routing -----------------------------------------------------------------

    private Addr masterFor(String key) {
        if (!cluster) {
            return single;
        }
        Addr[] map = slots;
        if (map == null) {
            map = loadSlots();
        }
        if (key == null) {
            for (Addr h : map) {
                if (h != null) {
                    return h;
                }
            }
            throw new TransportException(name + ": no master serves any slot", false, false, null);
        }
        Addr at = map[SlotHash.getSlot(key)];
        if (at == null) {
            throw new TransportException(name + ": no master serves the slot of \"" + key + "\"", false, false, null);
        }
        return at;
    }

    /** CLUSTER SLOTS from the first node that answers. */
    private synchronized Addr[] loadSlots() {
        List<Addr> tries = new ArrayList<>();
        Addr[] old = slots;
        if (old != null) {
            for (Addr h : old) {
                if (h != null && !tries.contains(h)) {
                    tries.add(h);
                }
            }
        }
        for (Addr h : seeds) {
            if (!tries.contains(h)) {
                tries.add(h);
            }
        }
        RuntimeException last = null;
        for (Addr h : tries) {
            try {
                Object reply = execOne(h, Duration.ofSeconds(2), new Object[] {"CLUSTER", "SLOTS"});
                Addr[] map = new Addr[SlotHash.SLOT_COUNT];
                for (Object r : (List<?>) reply) {
                    List<?> range = (List<?>) r;
                    int from = ((Long) range.get(0)).intValue();
                    int to = ((Long) range.get(1)).intValue();
                    List<?> master = (List<?>) range.get(2);
                    String host = String.valueOf(master.get(0));
                    if (host.isEmpty() || host.equals("?")) {
                        host = h.host();
                    }
                    Addr at = new Addr(host, ((Long) master.get(1)).intValue());
                    for (int s = from; s <= to; s++) {
                        map[s] = at;
                    }
                }
                slots = map;
                return map;
            } catch (RuntimeException e) {
                last = e;
            }
        }
        throw new TransportException(name + ": no node answered CLUSTER SLOTS" + (last == null ? "" : ": " + last.getMessage()), false, false, last);
    }

    /** A MOVED or ASK refusal: [address, "ASK"|"MOVED"], else null. */
    private static String[] redirection(ReplyError e) {
        String[] f = e.text().split(" ");
        if (f.length == 3 && (f[0].equals("MOVED") || f[0].equals("ASK"))) {
            return new String[] {f[2], f[0]};
        }
        return null;
    }

    private Object routed(String key, Duration timeout, Object[] args) {
        Addr at = masterFor(key);
        try {
            return execOne(at, timeout, args);
        } catch (ReplyError e) {
            String[] r = cluster ? redirection(e) : null;
            if (r == null) {
                throw e;
            }
            // The command did not run there: sent once more, where the cluster says.
            Addr to = Addr.parse(r[0]);
            if (r[1].equals("MOVED")) {
                loadSlotsQuietly();
                return execOne(to, timeout, args);
            }
            Object v = exec(to, timeout, List.of(new Object[] {"ASKING"}, args)).get(1);
            if (v instanceof ReplyError re) {
                throw re;
            }
            return v;
        } catch (TransportException e) {
            if (cluster) {
                loadSlotsQuietly(); // a failover may be under way: the next call asks the new master
            }
            throw e;
        }
    }

    private void loadSlotsQuietly() {
        try {
            loadSlots();
        } catch (RuntimeException e) {
            // the next call tries again
        }
    }

    // --- Transport -----------------------------------------------------------------------

    @Override
    public Object call(String key, Duration timeout, Object... args) {
        return routed(key, timeout, args);
    }

    @Override
    public Object callOnce(String key, Duration timeout, Object... args) {
        // routed() never re-sends after a lost reply (and relock's connections never
        // reconnect): only a MOVED or ASK refusal (nothing ran) sends it on, once.
        return routed(key, timeout, args);
    }

    @Override
    public List<Object> callEachMaster(Duration timeout, Object... args) {
        List<Object> out = new ArrayList<>();
        if (!cluster) {
            out.add(call(null, timeout, args));
            return out;
        }
        Addr[] map = slots == null ? loadSlots() : slots;
        Set<Addr> masters = new LinkedHashSet<>();
        for (Addr h : map) {
            if (h != null) {
                masters.add(h);
            }
        }
        for (Addr h : masters) {
            out.add(execOne(h, timeout, args));
        }
        return out;
    }

    @Override
    public Transport.Connection dedicated(String key) {
        Addr at = masterFor(key);
        return new Dedicated(at, open(at, null));
    }

    private final class Dedicated implements Transport.Connection {
        private final Addr at;
        private final StatefulRedisConnection<byte[], byte[]> c;
        private final List<AsyncCommand<byte[], byte[], Object>> inFlight = new java.util.concurrent.CopyOnWriteArrayList<>();
        private volatile boolean aborted;
        private volatile boolean whole = true;

        Dedicated(Addr at, StatefulRedisConnection<byte[], byte[]> c) {
            this.at = at;
            this.c = c;
        }

        @Override
        public String address() {
            return at.toString();
        }

        private List<Object> run(Duration bound, List<Object[]> commands) {
            whole = false;
            inFlight.clear();
            try {
                List<Object> out = exchange(at, c, bound, commands, inFlight, () -> aborted);
                whole = !aborted;
                return out;
            } catch (TransportException e) {
                if (Thread.currentThread().isInterrupted()) {
                    abort(); // interrupted: the server must drop the wait now
                }
                throw e;
            } catch (RedisException e) {
                throw new TransportException(at + ": " + (aborted ? "cut by relock" : e.getMessage()), true, false, e);
            } finally {
                inFlight.clear();
            }
        }

        @Override
        public Object call(Duration bound, Object... args) {
            Object v = run(bound, List.<Object[]>of(args)).get(0);
            if (v instanceof ReplyError re) {
                whole = !aborted;
                if (cluster && redirection(re) != null) {
                    // The slot moved (or is moving): the next dedicated connection for this key
                    // goes where the cluster says now.
                    loadSlotsQuietly();
                }
                throw re;
            }
            return v;
        }

        @Override
        public List<Object> pipeline(Duration bound, List<Object[]> commands) {
            return run(bound, commands);
        }

        @Override
        public void abort() {
            aborted = true;
            whole = false;
            try {
                c.closeAsync();
            } catch (RuntimeException e) {
                // closed already
            }
            // The caller waits on these: it is cut now, not when the close is seen.
            for (AsyncCommand<byte[], byte[], Object> cmd : inFlight) {
                cmd.completeExceptionally(new RedisException("cut by relock"));
            }
        }

        @Override
        public void close() {
            if (whole && !aborted) {
                keep(at, c);
            } else {
                drop(c);
            }
        }
    }

    @Override
    public void close() {
        closed = true;
        List<StatefulRedisConnection<byte[], byte[]>> all = new ArrayList<>();
        synchronized (idle) {
            for (ArrayDeque<StatefulRedisConnection<byte[], byte[]>> q : idle.values()) {
                all.addAll(q);
            }
            idle.clear();
            for (ArrayDeque<CompletableFuture<StatefulRedisConnection<byte[], byte[]>>> q : connecting.values()) {
                for (CompletableFuture<StatefulRedisConnection<byte[], byte[]>> f : q) {
                    f.thenAccept(LettuceTransport::drop);
                }
            }
            connecting.clear();
        }
        for (StatefulRedisConnection<byte[], byte[]> c : all) {
            drop(c);
        }
        // relock's own client (its connections still out close with it); the event loops are
        // the application's or relock's shared ones, not closed here.
        client.shutdownAsync(0, 2, TimeUnit.SECONDS);
    }
}
