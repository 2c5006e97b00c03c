package dev.relock.lettuce;

import dev.relock.testing.ReplicaAckCases;

/** Replica acknowledgements (relock-core's {@link ReplicaAckCases}) through Lettuce. */
class ReplicaAcksTest extends ReplicaAckCases<RedisServer> {
    @Override
    protected LettuceAdapter adapter() {
        return LettuceAdapter.INSTANCE;
    }
}
