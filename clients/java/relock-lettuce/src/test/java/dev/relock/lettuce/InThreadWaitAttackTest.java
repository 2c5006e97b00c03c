package dev.relock.lettuce;

import dev.relock.Relock;
import dev.relock.testing.InThreadWaitCases;

/** The in-thread wait's attacks (relock-core's {@link InThreadWaitCases}) through Lettuce. */
class InThreadWaitAttackTest extends InThreadWaitCases<RedisServer> {
    @Override
    protected RedisServer server() throws Exception {
        return new RedisServer();
    }

    @Override
    protected Relock open(RedisServer s) {
        return RelockLettuce.create(s.uri());
    }
}
