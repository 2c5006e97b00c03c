package dev.relock.spring;

import dev.relock.Relock;
import dev.relock.lettuce.RelockLettuce;
import io.lettuce.core.RedisURI;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import org.springframework.data.redis.connection.RedisClusterConfiguration;
import org.springframework.data.redis.connection.RedisConnectionFactory;
import org.springframework.data.redis.connection.RedisNode;
import org.springframework.data.redis.connection.RedisPassword;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.jedis.JedisConnectionFactory;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.util.ClassUtils;

/**
 * A {@link Relock} for the server (or cluster) of a Spring Data {@link RedisConnectionFactory}
 * (Lettuce or Jedis): its host, port, database, user, password and TLS. relock opens
 * connections of its own on Lettuce (relock-lettuce), never the factory's: their
 * auto-reconnect, pools and timeouts do not decide for it.
 */
public final class RelockSpring {
    private RelockSpring() {}

    public static Relock relockFor(RedisConnectionFactory factory, Relock.Settings settings) {
        RedisStandaloneConfiguration standalone;
        RedisClusterConfiguration cluster;
        boolean ssl;
        if (factory instanceof LettuceConnectionFactory l) {
            standalone = l.getStandaloneConfiguration();
            cluster = l.isClusterAware() ? l.getClusterConfiguration() : null;
            ssl = l.isUseSsl();
            if (l.isRedisSentinelAware()) {
                throw new IllegalStateException("relock: Redis Sentinel is not supported (a lock must live on the master it was granted on)");
            }
            if (l.getSocketConfiguration() != null) {
                throw new IllegalStateException("relock: a Unix domain socket connection factory is not supported yet: make the Relock bean yourself");
            }
            if (!(lettuceConfiguration(l) instanceof RedisStandaloneConfiguration) && !l.isClusterAware()) {
                // A static master/replica (or any other) configuration leaves the factory's
                // standalone configuration at its default, localhost:6379: a Relock made from
                // it would lock on that server, each host on its own (two holders).
                throw new IllegalStateException("relock: a LettuceConnectionFactory with a "
                    + lettuceConfiguration(l).getClass().getSimpleName()
                    + " is not supported (only standalone or cluster): make the Relock bean yourself");
            }
        } else if (ClassUtils.isPresent("redis.clients.jedis.Jedis", RelockSpring.class.getClassLoader())
                && factory instanceof JedisConnectionFactory j) {
            standalone = j.getStandaloneConfiguration();
            cluster = j.isRedisClusterAware() ? j.getClusterConfiguration() : null;
            ssl = j.isUseSsl();
            if (j.isRedisSentinelAware()) {
                throw new IllegalStateException("relock: Redis Sentinel is not supported (a lock must live on the master it was granted on)");
            }
        } else {
            throw new IllegalStateException("relock: a " + factory.getClass().getName()
                + " is neither a LettuceConnectionFactory nor a JedisConnectionFactory: make the Relock bean yourself");
        }
        if (cluster != null) {
            List<RedisURI> seeds = new ArrayList<>();
            for (RedisNode n : cluster.getClusterNodes()) {
                seeds.add(uri(n.getHost(), n.getPort() == null ? 6379 : n.getPort(), 0, cluster.getUsername(), cluster.getPassword(), ssl));
            }
            return RelockLettuce.cluster(seeds, null, settings);
        }
        return RelockLettuce.create(uri(standalone.getHostName(), standalone.getPort(), standalone.getDatabase(),
            standalone.getUsername(), standalone.getPassword(), ssl), null, settings);
    }

    /**
     * The configuration the factory was made with (Spring Data Redis keeps it in a private
     * field and says only whether it is cluster, sentinel or socket aware). Unreadable, the
     * factory is refused: guessing could lock on the wrong server.
     */
    private static Object lettuceConfiguration(LettuceConnectionFactory l) {
        try {
            Field f = LettuceConnectionFactory.class.getDeclaredField("configuration");
            f.setAccessible(true);
            Object cfg = f.get(l);
            if (cfg == null) {
                throw new IllegalStateException("relock: this LettuceConnectionFactory has no configuration");
            }
            return cfg;
        } catch (ReflectiveOperationException | RuntimeException e) {
            if (e instanceof IllegalStateException ise) {
                throw ise;
            }
            throw new IllegalStateException("relock: cannot tell which server this LettuceConnectionFactory connects to ("
                + e + "): make the Relock bean yourself", e);
        }
    }

    public static Relock relockFor(RedisConnectionFactory factory) {
        return relockFor(factory, Relock.Settings.defaults());
    }

    private static RedisURI uri(String host, int port, int db, String user, RedisPassword password, boolean ssl) {
        RedisURI.Builder b = RedisURI.builder().withHost(host).withPort(port).withDatabase(db).withSsl(ssl);
        if (password != null && password.isPresent()) {
            char[] p = password.get();
            if (user != null && !user.isEmpty()) {
                b.withAuthentication(user, p);
            } else {
                b.withPassword(p);
            }
        }
        return b.build();
    }
}
