package dev.relock.jedis;

import dev.relock.testing.RedlockCases;

/** Redlock over three masters (relock-core's {@link RedlockCases}) through Jedis. */
class RedlockTest extends RedlockCases<RedisServer> {
    @Override
    protected JedisAdapter adapter() {
        return JedisAdapter.INSTANCE;
    }
}
