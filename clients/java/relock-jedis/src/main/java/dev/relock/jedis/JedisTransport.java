package dev.relock.jedis;

import dev.relock.ReplyError;
import dev.relock.Transport;
import dev.relock.TransportException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import redis.clients.jedis.CommandArguments;
import redis.clients.jedis.DefaultJedisSocketFactory;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisClientConfig;
import redis.clients.jedis.JedisSocketFactory;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.util.JedisClusterCRC16;
import redis.clients.jedis.util.KeyValue;

/**
 * relock's {@link Transport} on Jedis: one server, or a Redis Cluster routed by key.
 *
 * <p>relock never sends its commands through the application's Jedis client (whose pool,
 * retries and socket timeout are the application's): it opens connections of its own with the
 * same {@link JedisClientConfig} (user, password, TLS, protocol, database). Each call sets its
 * own socket timeout (the node timeout; none for a blocking LOCK.WAIT or LOCK.OBSERVE, which
 * relock bounds itself), and nothing is ever re-sent: a connection error is reported, with
 * whether the command may have left. In a cluster relock keeps its own slot map (CLUSTER
 * SLOTS), and follows a MOVED or ASK refusal once (the command did not run there).
 */
public final class JedisTransport implements Transport {
    private static final int MAX_IDLE = 16;

    private final JedisClientConfig config;
    private final boolean cluster;
    private final String name;
    private final HostAndPort single;
    private final Set<HostAndPort> seeds;
    /** the cluster's master of each slot, or null before the first load. */
    private volatile HostAndPort[] slots;
    private final Map<HostAndPort, ArrayDeque<redis.clients.jedis.Connection>> idle = new HashMap<>();
    private volatile boolean closed;

    private JedisTransport(HostAndPort single, Collection<HostAndPort> seeds, JedisClientConfig config) {
        this.config = config;
        this.single = single;
        this.cluster = single == null;
        this.seeds = seeds == null ? Set.of() : new LinkedHashSet<>(seeds);
        if (cluster) {
            List<String> n = new ArrayList<>();
            for (HostAndPort h : this.seeds) {
                n.add(h.toString());
            }
            this.name = "cluster[" + String.join(",", n) + "]";
        } else {
            this.name = single.toString();
        }
    }

    /** One server at address, with the application's client config. */
    public static JedisTransport server(HostAndPort address, JedisClientConfig config) {
        return new JedisTransport(address, null, config);
    }

    /** A Redis Cluster known by some of its nodes, with the application's client config. */
    public static JedisTransport cluster(Collection<HostAndPort> seeds, JedisClientConfig config) {
        if (seeds.isEmpty()) {
            throw new IllegalArgumentException("a cluster needs at least one node's address");
        }
        return new JedisTransport(null, seeds, config);
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

    private redis.clients.jedis.Connection open(HostAndPort at) {
        if (closed) {
            throw new TransportException("the relock transport was closed", false, false, null);
        }
        synchronized (idle) {
            ArrayDeque<redis.clients.jedis.Connection> q = idle.get(at);
            while (q != null && !q.isEmpty()) {
                redis.clients.jedis.Connection c = q.pollLast();
                if (c.isConnected() && !c.isBroken()) {
                    return c;
                }
                c.close();
            }
        }
        try {
            return new redis.clients.jedis.Connection(new OnceSocketFactory(new DefaultJedisSocketFactory(at, config)), config);
        } catch (RuntimeException e) {
            // Nothing was sent: the connection (or its handshake) failed.
            throw new TransportException(at + ": cannot connect: " + e.getMessage(), false, false, e);
        }
    }

    private void keep(HostAndPort at, redis.clients.jedis.Connection c) {
        synchronized (idle) {
            if (!closed && c.isConnected() && !c.isBroken()) {
                ArrayDeque<redis.clients.jedis.Connection> q = idle.computeIfAbsent(at, k -> new ArrayDeque<>());
                if (q.size() < MAX_IDLE) {
                    q.addLast(c);
                    return;
                }
            }
        }
        drop(c);
    }

    private static void drop(redis.clients.jedis.Connection c) {
        try {
            c.disconnect();
        } catch (RuntimeException e) {
            // already gone
        }
    }

    private static final class Cmd implements ProtocolCommand {
        private final byte[] raw;

        Cmd(String name) {
            raw = name.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public byte[] getRaw() {
            return raw;
        }
    }

    private static final Map<String, Cmd> COMMANDS = new java.util.concurrent.ConcurrentHashMap<>();

    static CommandArguments args(Object[] args) {
        if (args.length == 0) {
            throw new IllegalArgumentException("no command");
        }
        CommandArguments a = new CommandArguments(COMMANDS.computeIfAbsent(String.valueOf(args[0]), Cmd::new));
        for (int i = 1; i < args.length; i++) {
            Object x = args[i];
            if (x instanceof byte[] b) {
                a.add(b);
            } else if (x instanceof String s) {
                a.add(s.getBytes(StandardCharsets.UTF_8));
            } else if (x instanceof Long || x instanceof Integer || x instanceof Short || x instanceof Byte) {
                a.add(((Number) x).longValue());
            } else {
                a.add(String.valueOf(x).getBytes(StandardCharsets.UTF_8));
            }
        }
        return a;
    }

    /** Jedis's raw reply as a Transport gives it. */
    static Object convert(Object v) {
        if (v == null || v instanceof Long || v instanceof Double || v instanceof Boolean) {
            return v;
        }
        if (v instanceof byte[] b) {
            return new String(b, StandardCharsets.UTF_8);
        }
        if (v instanceof JedisDataException e) {
            return new ReplyError(e.getMessage());
        }
        if (v instanceof List<?> l) {
            if (!l.isEmpty() && l.get(0) instanceof KeyValue) {
                Map<Object, Object> m = new LinkedHashMap<>();
                for (Object e : l) {
                    KeyValue<?, ?> kv = (KeyValue<?, ?>) e;
                    m.put(convert(kv.getKey()), convert(kv.getValue()));
                }
                return m;
            }
            List<Object> out = new ArrayList<>(l.size());
            for (Object e : l) {
                out.add(convert(e));
            }
            return out;
        }
        if (v instanceof Map<?, ?> m) {
            Map<Object, Object> out = new LinkedHashMap<>();
            for (Map.Entry<?, ?> e : m.entrySet()) {
                out.put(convert(e.getKey()), convert(e.getValue()));
            }
            return out;
        }
        if (v instanceof Number n) {
            return n.longValue();
        }
        return v.toString();
    }

    private static int timeoutMs(Duration d) {
        if (d == null) {
            return 0; // no read timeout: relock bounds the call itself
        }
        return (int) Math.max(1, Math.min(Integer.MAX_VALUE, d.toMillis()));
    }

    private static boolean isTimeout(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof java.net.SocketTimeoutException) {
                return true;
            }
        }
        return false;
    }

    /** One command on c, its socket timeout set to timeout; the connection is given back or dropped. */
    private Object exec(HostAndPort at, redis.clients.jedis.Connection c, Duration timeout, List<Object[]> commands, boolean pipeline) {
        boolean whole = false;
        try {
            c.setSoTimeout(timeoutMs(timeout));
            for (Object[] cmd : commands) {
                c.sendCommand(args(cmd));
            }
            Object out;
            if (pipeline) {
                List<Object> replies = new ArrayList<>();
                for (Object r : c.getMany(commands.size())) {
                    replies.add(convert(r));
                }
                out = replies;
            } else {
                try {
                    out = convert(c.getOne());
                } catch (JedisDataException e) {
                    whole = true;
                    throw new ReplyError(e.getMessage());
                }
            }
            whole = true;
            return out;
        } catch (JedisConnectionException e) {
            // Something may have left: the command may have run.
            throw new TransportException(at + ": " + e.getMessage(), true, isTimeout(e), e);
        } finally {
            if (whole) {
                keep(at, c);
            } else {
                drop(c);
            }
        }
    }

    // --- cluster routing -----------------------------------------------------------------

    private HostAndPort masterFor(String key) {
        if (!cluster) {
            return single;
        }
        HostAndPort[] map = slots;
        if (map == null) {
            map = loadSlots();
        }
        if (key == null) {
            for (HostAndPort h : map) {
                if (h != null) {
                    return h;
                }
            }
            throw new TransportException(name + ": no master serves any slot", false, false, null);
        }
        HostAndPort at = map[JedisClusterCRC16.getSlot(key)];
        if (at == null) {
            throw new TransportException(name + ": no master serves the slot of \"" + key + "\"", false, false, null);
        }
        return at;
    }

    /** CLUSTER SLOTS from the first node that answers. */
    private synchronized HostAndPort[] loadSlots() {
        List<HostAndPort> tries = new ArrayList<>();
        HostAndPort[] old = slots;
        if (old != null) {
            for (HostAndPort h : old) {
                if (h != null && !tries.contains(h)) {
                    tries.add(h);
                }
            }
        }
        for (HostAndPort h : seeds) {
            if (!tries.contains(h)) {
                tries.add(h);
            }
        }
        RuntimeException last = null;
        for (HostAndPort h : tries) {
            try {
                Object reply = exec(h, open(h), Duration.ofSeconds(2), List.<Object[]>of(new Object[] {"CLUSTER", "SLOTS"}), false);
                HostAndPort[] map = new HostAndPort[16384];
                for (Object r : (List<?>) reply) {
                    List<?> range = (List<?>) r;
                    int from = ((Long) range.get(0)).intValue();
                    int to = ((Long) range.get(1)).intValue();
                    List<?> master = (List<?>) range.get(2);
                    String host = String.valueOf(master.get(0));
                    if (host.isEmpty() || host.equals("?")) {
                        host = h.getHost();
                    }
                    HostAndPort at = new HostAndPort(host, ((Long) master.get(1)).intValue());
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
        HostAndPort at = masterFor(key);
        try {
            return exec(at, open(at), timeout, List.<Object[]>of(args), false);
        } catch (ReplyError e) {
            String[] r = cluster ? redirection(e) : null;
            if (r == null) {
                throw e;
            }
            // The command did not run there: sent once more, where the cluster says.
            HostAndPort to = HostAndPort.from(r[0]);
            if (r[1].equals("MOVED")) {
                loadSlotsQuietly();
                Object v = exec(to, open(to), timeout, List.<Object[]>of(args), false);
                return v;
            }
            List<Object> replies = (List<Object>) exec(to, open(to), timeout, List.of(new Object[] {"ASKING"}, args), true);
            Object v = replies.get(1);
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
        // routed() never re-sends after a lost reply; only a MOVED or ASK refusal (nothing ran)
        // sends it on, once.
        return routed(key, timeout, args);
    }

    @Override
    public List<Object> callEachMaster(Duration timeout, Object... args) {
        List<Object> out = new ArrayList<>();
        if (!cluster) {
            out.add(call(null, timeout, args));
            return out;
        }
        HostAndPort[] map = slots == null ? loadSlots() : slots;
        Set<HostAndPort> masters = new LinkedHashSet<>();
        for (HostAndPort h : map) {
            if (h != null) {
                masters.add(h);
            }
        }
        for (HostAndPort h : masters) {
            out.add(exec(h, open(h), timeout, List.<Object[]>of(args), false));
        }
        return out;
    }

    @Override
    public Transport.Connection dedicated(String key) {
        HostAndPort at = masterFor(key);
        return new Dedicated(at, open(at));
    }

    /**
     * Opens its socket once. Jedis's {@code sendCommand} reconnects a closed connection on a
     * bare socket, without the handshake (no AUTH, HELLO, SELECT or CLIENT SETNAME): after
     * {@link Dedicated#abort} a {@code LOCK.WAIT} not yet written went out that way, to
     * database 0, and its grant was left to expire unowned. A connection relock closed stays
     * closed; a new one is made with its handshake.
     */
    static final class OnceSocketFactory implements JedisSocketFactory {
        private final JedisSocketFactory inner;
        private final AtomicBoolean opened = new AtomicBoolean();

        OnceSocketFactory(JedisSocketFactory inner) {
            this.inner = inner;
        }

        @Override
        public Socket createSocket() throws JedisConnectionException {
            if (opened.getAndSet(true)) {
                throw new JedisConnectionException("relock: this connection was closed and is never reopened");
            }
            return inner.createSocket();
        }
    }

    private final class Dedicated implements Transport.Connection {
        private final HostAndPort at;
        private final redis.clients.jedis.Connection c;
        private volatile boolean aborted;
        private volatile boolean whole = true;

        Dedicated(HostAndPort at, redis.clients.jedis.Connection c) {
            this.at = at;
            this.c = c;
        }

        @Override
        public String address() {
            return at.toString();
        }

        private Object run(Duration bound, List<Object[]> commands, boolean pipeline) {
            whole = false;
            if (aborted) {
                // Cut before anything was written (the round was over when this call began).
                throw new TransportException(at + ": cut by relock", false, false, null);
            }
            try {
                c.setSoTimeout(timeoutMs(bound));
                for (Object[] cmd : commands) {
                    c.sendCommand(args(cmd));
                }
                Object out;
                if (pipeline) {
                    List<Object> replies = new ArrayList<>();
                    for (Object r : c.getMany(commands.size())) {
                        replies.add(convert(r));
                    }
                    out = replies;
                } else {
                    try {
                        out = convert(c.getOne());
                    } catch (JedisDataException e) {
                        whole = !aborted;
                        ReplyError re = new ReplyError(e.getMessage());
                        if (cluster && redirection(re) != null) {
                            // The slot moved (or is moving): the next dedicated connection for
                            // this key goes where the cluster says now.
                            loadSlotsQuietly();
                        }
                        throw re;
                    }
                }
                whole = !aborted;
                return out;
            } catch (JedisConnectionException e) {
                throw new TransportException(at + ": " + (aborted ? "cut by relock" : e.getMessage()), true, !aborted && isTimeout(e), e);
            }
        }

        @Override
        public Object call(Duration bound, Object... args) {
            return run(bound, List.<Object[]>of(args), false);
        }

        @SuppressWarnings("unchecked")
        @Override
        public List<Object> pipeline(Duration bound, List<Object[]> commands) {
            return (List<Object>) run(bound, commands, true);
        }

        @Override
        public void abort() {
            aborted = true;
            whole = false;
            try {
                c.forceDisconnect();
            } catch (Exception e) {
                // closed already
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
        List<redis.clients.jedis.Connection> all = new ArrayList<>();
        synchronized (idle) {
            for (ArrayDeque<redis.clients.jedis.Connection> q : idle.values()) {
                all.addAll(q);
            }
            idle.clear();
        }
        for (redis.clients.jedis.Connection c : all) {
            drop(c);
        }
    }
}
