package dev.relock.lettuce;

import dev.relock.Relock;
import dev.relock.testing.AdapterCases;
import java.util.List;

/** The shared case classes' view of Lettuce. */
final class LettuceAdapter implements AdapterCases.Adapter<RedisServer> {
    static final LettuceAdapter INSTANCE = new LettuceAdapter();

    @Override
    public RedisServer server() throws Exception {
        return new RedisServer();
    }

    @Override
    public Relock open(RedisServer server, Relock.Settings settings) {
        return RelockLettuce.create(server.uri(), null, settings);
    }

    @Override
    public Relock redlock(List<RedisServer> masters) {
        return RelockLettuce.redlock(masters.stream().map(RedisServer::uri).toList(), null);
    }
}
