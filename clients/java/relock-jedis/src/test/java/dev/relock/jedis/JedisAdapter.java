package dev.relock.jedis;

import dev.relock.Relock;
import dev.relock.testing.AdapterCases;
import java.util.List;

/** The shared case classes' view of Jedis. */
final class JedisAdapter implements AdapterCases.Adapter<RedisServer> {
    static final JedisAdapter INSTANCE = new JedisAdapter();

    @Override
    public RedisServer server() throws Exception {
        return new RedisServer();
    }

    @Override
    public Relock open(RedisServer server, Relock.Settings settings) {
        return RelockJedis.create(server.address(), null, settings);
    }

    @Override
    public Relock redlock(List<RedisServer> masters) {
        return RelockJedis.redlock(masters.stream().map(RedisServer::address).toList(), null);
    }
}
