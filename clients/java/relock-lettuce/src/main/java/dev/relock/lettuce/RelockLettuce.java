package dev.relock.lettuce;

import dev.relock.Relock;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.RedisClusterClient;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;

/**
 * {@link Relock} on Lettuce. relock takes the {@link RedisURI} (user, password, TLS, database),
 * the {@link ClientOptions} and the event loops ({@code ClientResources}) of the application's
 * client and opens connections of its own, without auto-reconnect and without a command
 * timeout: the application's connections, their re-send after a reconnect and their timeouts
 * never decide for it (see {@link LettuceTransport}).
 *
 * <pre>{@code
 * Relock locks = RelockLettuce.create(redisClient);                 // one server (its RedisURI)
 * Relock locks = RelockLettuce.create(redisClient, uri);            // one server at uri
 * Relock locks = RelockLettuce.cluster(redisClusterClient);         // a Redis Cluster
 * Relock locks = RelockLettuce.redlock(List.of(a, b, c), options);  // Redlock over independent masters
 * }</pre>
 */
public final class RelockLettuce {
    private RelockLettuce() {}

    /** One server at uri, with the default options and relock's own event loops. */
    public static Relock create(RedisURI uri) {
        return Relock.create(LettuceTransport.server(uri, null));
    }

    /** One server at uri with the application's options (null: defaults). */
    public static Relock create(RedisURI uri, ClientOptions options, Relock.Settings settings) {
        return Relock.create(LettuceTransport.server(uri, options), settings);
    }

    /** The server at uri, with the options and event loops of the application's {@link RedisClient}. */
    public static Relock create(RedisClient client, RedisURI uri) {
        return create(client, uri, Relock.Settings.defaults());
    }

    public static Relock create(RedisClient client, RedisURI uri, Relock.Settings settings) {
        return Relock.create(LettuceTransport.server(uri, client.getOptions(), client.getResources()), settings);
    }

    /**
     * The server a {@link RedisClient} was created for ({@code RedisClient.create(uri)}), with its
     * options and event loops. A client created without a URI has none: give it with
     * {@link #create(RedisClient, RedisURI)}.
     */
    public static Relock create(RedisClient client) {
        return create(client, uriOf(client));
    }

    /** A Redis Cluster, known by the seed URIs, options and event loops of a {@link RedisClusterClient}. */
    public static Relock cluster(RedisClusterClient client) {
        return cluster(client, Relock.Settings.defaults());
    }

    public static Relock cluster(RedisClusterClient client, Relock.Settings settings) {
        return Relock.create(LettuceTransport.cluster(seedsOf(client), client.getOptions(), client.getResources()), settings);
    }

    /** A Redis Cluster known by some of its nodes (the first one's credentials and TLS apply to all). */
    public static Relock cluster(List<RedisURI> seeds, ClientOptions options, Relock.Settings settings) {
        return Relock.create(LettuceTransport.cluster(seeds, options), settings);
    }

    /** Redlock over independent masters (each one server, not a cluster). */
    public static Relock redlock(List<RedisURI> masters, ClientOptions options, Relock.Settings settings) {
        List<LettuceTransport> ts = new ArrayList<>();
        for (RedisURI m : masters) {
            ts.add(LettuceTransport.server(m, options));
        }
        return Relock.redlock(ts, settings);
    }

    public static Relock redlock(List<RedisURI> masters, ClientOptions options) {
        return redlock(masters, options, Relock.Settings.defaults());
    }

    // Lettuce keeps the URIs a client was created with in private fields (no getter).
    static RedisURI uriOf(RedisClient client) {
        Object u = field(client, RedisClient.class, "redisURI");
        if (!(u instanceof RedisURI uri)) {
            throw new IllegalArgumentException("this RedisClient was created without a RedisURI: "
                + "give it with RelockLettuce.create(client, uri)");
        }
        return uri;
    }

    static List<RedisURI> seedsOf(RedisClusterClient client) {
        List<RedisURI> seeds = new ArrayList<>();
        if (field(client, RedisClusterClient.class, "initialUris") instanceof Iterable<?> it) {
            for (Object o : it) {
                seeds.add((RedisURI) o);
            }
        }
        if (seeds.isEmpty()) {
            throw new IllegalArgumentException("no seed URI found in this RedisClusterClient: use RelockLettuce.cluster(seeds, options, settings)");
        }
        return seeds;
    }

    private static Object field(Object o, Class<?> c, String name) {
        try {
            Field f = c.getDeclaredField(name);
            f.setAccessible(true);
            return f.get(o);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalArgumentException("cannot read the " + name + " of this Lettuce " + c.getSimpleName()
                + " (" + e + "): give the URI(s) explicitly", e);
        }
    }
}
