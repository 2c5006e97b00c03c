package dev.relock.jedis;

import dev.relock.testing.ReplicaAckCases;

/** Replica acknowledgements (relock-core's {@link ReplicaAckCases}) through Jedis. */
class ReplicaAcksTest extends ReplicaAckCases<RedisServer> {
    @Override
    protected JedisAdapter adapter() {
        return JedisAdapter.INSTANCE;
    }
}
