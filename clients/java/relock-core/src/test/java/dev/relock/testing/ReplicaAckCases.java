package dev.relock.testing;

import static java.time.Duration.ofMillis;
import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.LockOptions;
import dev.relock.NotAcquiredException;
import dev.relock.Relock;
import dev.relock.RelockException;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Replica acknowledgements: a master with one replica (REPLICAOF), the replica stopped by
 * SIGSTOP: grants are refused and taken back, renewals do not count; WAIT goes on the write's
 * own connection. Run by each adapter (relock-jedis's and relock-lettuce's ReplicaAcksTest).
 */
public abstract class ReplicaAckCases<S extends RedisServer> extends AdapterCases<S> {

    @Test
    protected void grantsAndRenewalsWaitForTheReplica() throws Exception {
        try (S master = server();
             S replica = server()) {
            replica.cmd("REPLICAOF", "127.0.0.1", String.valueOf(master.port));
            BehaviourCases.eventually(ofSeconds(20), () -> String.valueOf(replica.cmd("INFO", "replication")).contains("master_link_status:up"));
            try (Relock locks = open(master,
                    Relock.Settings.defaults().nodeTimeout(ofSeconds(1)).replicaAcks(1, ofMillis(300)))) {
                Hold h = locks.acquire("k", LockOptions.ttl(ofSeconds(30)));
                h.renew();
                try (Hold g = locks.acquireAll(List.of("g1", "g2"), LockOptions.ttl(ofSeconds(30)))) {
                    assertEquals(2, g.keys().size());
                }
                replica.signal("STOP");
                try {
                    NotAcquiredException e = assertThrows(NotAcquiredException.class, () -> locks.acquire("k2", LockOptions.ttl(ofSeconds(30))));
                    assertTrue(e.getMessage().contains("only 0 of 1 required replica acknowledgements"), e.getMessage());
                    assertTrue(locks.info("k2").isEmpty(), "the grant not acknowledged was taken back");
                    RelockException r = assertThrows(RelockException.class, h::renew);
                    assertEquals(RelockException.Kind.NO_QUORUM, r.kind(), r.getMessage());
                    assertTrue(h.isHeld(), "still valid until its earlier validity ends");
                } finally {
                    replica.signal("CONT");
                }
                BehaviourCases.eventually(ofSeconds(20), () -> String.valueOf(replica.cmd("INFO", "replication")).contains("master_link_status:up"));
                locks.acquire("k2", LockOptions.ttl(ofSeconds(30))).release();
                h.renew();
                h.release();
                assertTrue(locks.info("k").isEmpty());
            }
            try (Relock alone = open(replica,
                    Relock.Settings.defaults().replicaAcks(1, ofMillis(50)))) {
                // A replica is read-only: its refusal (READONLY) is transient, never a grant.
                assertThrows(NotAcquiredException.class, () -> alone.acquire("k3", LockOptions.ttl(ofSeconds(5))));
            }
        }
    }
}
