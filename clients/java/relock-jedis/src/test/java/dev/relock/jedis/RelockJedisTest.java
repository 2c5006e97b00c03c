package dev.relock.jedis;

import static java.time.Duration.ofMillis;
import static java.time.Duration.ofSeconds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.Info;
import dev.relock.Leadership;
import dev.relock.LockLostException;
import dev.relock.LockOptions;
import dev.relock.LossReason;
import dev.relock.NotAcquiredException;
import dev.relock.Observation;
import dev.relock.Relock;
import dev.relock.RelockException;
import dev.relock.RelockLock;
import dev.relock.RelockSemaphore;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReadWriteLock;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import dev.relock.testing.BehaviourCases;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.RedisProtocol;

/** The behaviour cases the other clients have, on one real server through Jedis. */
class RelockJedisTest extends BehaviourCases<RedisServer> {
    @Override
    protected RedisServer server() throws Exception {
        return new RedisServer();
    }

    @Override
    protected Relock open(RedisServer s) {
        return RelockJedis.create(s.address(), null);
    }

    @Test
    void repliesDecodeUnderResp2AndResp3() {
        for (RedisProtocol protocol : List.of(RedisProtocol.RESP2, RedisProtocol.RESP3)) {
            try (Relock r = RelockJedis.create(srv.address(), DefaultJedisClientConfig.builder().protocol(protocol).build())) {
                Hold h = r.acquire(k, ttl(10_000));
                Info info = r.info(k).orElseThrow();
                assertEquals(h.owner(), info.owner(), protocol.name());
                assertEquals(h.token(), info.token(), protocol.name());
                assertEquals(1, r.holders(k, 0).size());
                assertEquals(1L, srv.cmd("LOCK.FORCERELEASE", k));
                assertEquals("forcereleased", r.history(k, 10).get(0).reason(), protocol.name());
            }
        }
    }

    @Test
    void aWaitIsNotCutByTheDriversSocketTimeout() throws Exception {
        // The application's config has a 200 ms socket timeout: relock's waits must not use it.
        try (Relock shortTimeout = RelockJedis.create(srv.address(), DefaultJedisClientConfig.builder().socketTimeoutMillis(200).build())) {
            Hold h = locks.acquire(k, ttl(10_000));
            Future<Hold> waiter = pool.submit(() -> shortTimeout.acquire(k, ttl(10_000).waitAtMost(ofSeconds(10))));
            eventually(ofSeconds(20), () -> locks.waiters(k, 0).size() == 1);
            long client = locks.waiters(k, 0).get(0).client();
            Thread.sleep(700); // marked: more than three of the driver's socket timeouts pass
            assertEquals(List.of(client), locks.waiters(k, 0).stream().map(w -> w.client()).toList(),
                "the same connection still waits, never cut and queued again");
            h.release();
            waiter.get(30, TimeUnit.SECONDS).release();
        }
    }

    @Test
    void theApplicationsExhaustedPoolDoesNotStopRelock() throws Exception {
        redis.clients.jedis.JedisPoolConfig one = new redis.clients.jedis.JedisPoolConfig();
        one.setMaxTotal(1);
        one.setMaxWait(ofMillis(100));
        try (redis.clients.jedis.JedisPool app = new redis.clients.jedis.JedisPool(one, srv.address(), DefaultJedisClientConfig.builder().build());
             Relock fromPool = RelockJedis.create(app, null);
             redis.clients.jedis.Jedis taken = app.getResource()) {
            assertThrows(Exception.class, app::getResource, "the application's pool is exhausted");
            Hold h = fromPool.acquire(k, ttl(900));
            Thread.sleep(1000); // marked: renewals run while the pool stays exhausted
            assertTrue(h.isHeld(), () -> "lost: " + h.lost().getNow(null));
            h.release();
            assertEquals("PONG", taken.ping());
        }
    }
}
