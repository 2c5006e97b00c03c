package dev.relock.jedis;

import dev.relock.testing.VirtualThreadCases;

/** Virtual threads (relock-core's {@link VirtualThreadCases}) through Jedis. */
class VirtualThreadsTest extends VirtualThreadCases<RedisServer> {
    @Override
    protected JedisAdapter adapter() {
        return JedisAdapter.INSTANCE;
    }
}
