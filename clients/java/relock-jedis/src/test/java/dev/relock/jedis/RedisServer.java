package dev.relock.jedis;

import java.io.IOException;
import redis.clients.jedis.HostAndPort;

/** The test's redis-server (relock-core's {@link dev.relock.testing.RedisServer}), for Jedis. */
public final class RedisServer extends dev.relock.testing.RedisServer {
    public RedisServer(String... extra) throws IOException, InterruptedException {
        super(extra);
    }

    public RedisServer(boolean withModule, String... extra) throws IOException, InterruptedException {
        super(withModule, extra);
    }

    public HostAndPort address() {
        return new HostAndPort("127.0.0.1", port);
    }
}
