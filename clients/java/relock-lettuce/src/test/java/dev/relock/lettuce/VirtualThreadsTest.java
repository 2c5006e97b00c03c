package dev.relock.lettuce;

import dev.relock.testing.VirtualThreadCases;

/** Virtual threads (relock-core's {@link VirtualThreadCases}) through Lettuce. */
class VirtualThreadsTest extends VirtualThreadCases<RedisServer> {
    @Override
    protected LettuceAdapter adapter() {
        return LettuceAdapter.INSTANCE;
    }
}
