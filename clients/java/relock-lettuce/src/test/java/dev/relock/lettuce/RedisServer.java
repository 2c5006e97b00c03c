package dev.relock.lettuce;

import io.lettuce.core.RedisURI;
import java.io.IOException;

/** The test's redis-server (relock-core's {@link dev.relock.testing.RedisServer}), for Lettuce. */
public final class RedisServer extends dev.relock.testing.RedisServer {
    public RedisServer(String... extra) throws IOException, InterruptedException {
        super(extra);
    }

    public RedisServer(boolean withModule, String... extra) throws IOException, InterruptedException {
        super(withModule, extra);
    }

    public RedisURI uri() {
        return RedisURI.create("127.0.0.1", port);
    }

    public String address() {
        return hostPort();
    }
}
