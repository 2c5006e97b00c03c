package dev.relock.jedis;

import dev.relock.Relock;
import java.util.ArrayList;
import java.util.List;
import redis.clients.jedis.Connection;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisClientConfig;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.RedisClient;

/**
 * {@link Relock} on Jedis. relock takes the address (and the {@link JedisClientConfig}: user,
 * password, TLS, protocol, database) of the application's client and opens connections of its
 * own: the application's pool, retries and socket timeout never decide for it. Give the same
 * config the application's client was built with when it has credentials or TLS.
 *
 * <pre>{@code
 * Relock locks = RelockJedis.create(redisClient);                 // one server (RedisClient, JedisPool)
 * Relock locks = RelockJedis.cluster(jedisCluster, config);        // a Redis Cluster
 * Relock locks = RelockJedis.redlock(List.of(a, b, c), config);    // Redlock over independent masters
 * }</pre>
 */
public final class RelockJedis {
    private RelockJedis() {}

    private static JedisClientConfig orDefault(JedisClientConfig config) {
        return config != null ? config : DefaultJedisClientConfig.builder().build();
    }

    /** One server at address. */
    public static Relock create(HostAndPort address, JedisClientConfig config) {
        return Relock.create(JedisTransport.server(address, orDefault(config)));
    }

    public static Relock create(HostAndPort address, JedisClientConfig config, Relock.Settings settings) {
        return Relock.create(JedisTransport.server(address, orDefault(config)), settings);
    }

    /** The server of a {@link RedisClient} (Jedis 7's JedisPooled); config as the client's (null: defaults). */
    public static Relock create(RedisClient client, JedisClientConfig config) {
        try (Connection c = client.getPool().getResource()) {
            return create(c.getHostAndPort(), config);
        }
    }

    /** The server of a {@link RedisClient} without credentials or TLS. */
    public static Relock create(RedisClient client) {
        return create(client, null);
    }

    /** The server of a {@link JedisPool}; config as the pool's (null: defaults). */
    public static Relock create(JedisPool pool, JedisClientConfig config) {
        try (Jedis j = pool.getResource()) {
            return create(j.getConnection().getHostAndPort(), config);
        }
    }

    /** A Redis Cluster, known by the nodes of a {@link JedisCluster}. */
    public static Relock cluster(JedisCluster cluster, JedisClientConfig config) {
        List<HostAndPort> seeds = new ArrayList<>();
        for (String n : cluster.getClusterNodes().keySet()) {
            seeds.add(HostAndPort.from(n));
        }
        return Relock.create(JedisTransport.cluster(seeds, orDefault(config)));
    }

    /** A Redis Cluster known by some of its nodes. */
    public static Relock cluster(List<HostAndPort> seeds, JedisClientConfig config, Relock.Settings settings) {
        return Relock.create(JedisTransport.cluster(seeds, orDefault(config)), settings);
    }

    /** Redlock over independent masters (each one server, not a cluster). */
    public static Relock redlock(List<HostAndPort> masters, JedisClientConfig config, Relock.Settings settings) {
        List<JedisTransport> ts = new ArrayList<>();
        for (HostAndPort m : masters) {
            ts.add(JedisTransport.server(m, orDefault(config)));
        }
        return Relock.redlock(ts, settings);
    }

    public static Relock redlock(List<HostAndPort> masters, JedisClientConfig config) {
        return redlock(masters, config, Relock.Settings.defaults());
    }
}
