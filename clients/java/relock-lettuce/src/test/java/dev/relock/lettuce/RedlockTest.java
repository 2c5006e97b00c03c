package dev.relock.lettuce;

import dev.relock.testing.RedlockCases;

/** Redlock over three masters (relock-core's {@link RedlockCases}) through Lettuce. */
class RedlockTest extends RedlockCases<RedisServer> {
    @Override
    protected LettuceAdapter adapter() {
        return LettuceAdapter.INSTANCE;
    }
}
