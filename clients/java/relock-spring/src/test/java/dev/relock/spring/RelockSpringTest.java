package dev.relock.spring;

import dev.relock.testing.RedisServer;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Relock;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.core.env.Environment;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.RedisStaticMasterReplicaConfiguration;
import org.springframework.data.redis.connection.jedis.JedisConnectionFactory;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.integration.support.locks.LockRegistry;

/**
 * A real Spring Boot context (auto-configuration) against a real redis-server with the module:
 * the Relock and the LockRegistry come from a Lettuce (or Jedis) RedisConnectionFactory, and
 * locks taken through the registry are relock's locks on the server.
 */
class RelockSpringTest {
    static RedisServer srv;

    @BeforeAll
    static void start() throws Exception {
        srv = new RedisServer();
    }

    @AfterAll
    static void stop() {
        srv.close();
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class LettuceApp {
        @Bean
        LettuceConnectionFactory redisConnectionFactory(Environment env) {
            return new LettuceConnectionFactory(new RedisStandaloneConfiguration("127.0.0.1", env.getProperty("test.port", Integer.class)));
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class JedisApp {
        @Bean
        JedisConnectionFactory redisConnectionFactory(Environment env) {
            return new JedisConnectionFactory(new RedisStandaloneConfiguration("127.0.0.1", env.getProperty("test.port", Integer.class)));
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class NoRedisApp {
    }

    static ConfigurableApplicationContext run(Class<?> app) {
        return new SpringApplicationBuilder(app).web(WebApplicationType.NONE)
            .properties("test.port=" + srv.port, "relock.registry.prefix=app:", "relock.registry.ttl=5s").run();
    }

    @Test
    void theRegistryLocksThroughRelockInASpringContext() throws Exception {
        ExecutorService pool = Executors.newCachedThreadPool();
        Relock relock;
        try (ConfigurableApplicationContext ctx = run(LettuceApp.class)) {
            relock = ctx.getBean(Relock.class);
            @SuppressWarnings("unchecked")
            LockRegistry<Lock> registry = ctx.getBean(LockRegistry.class);
            assertInstanceOf(RelockLockRegistry.class, registry);
            Lock lock = registry.obtain("orders:7");
            assertSame(lock, registry.obtain("orders:7"), "one Lock per key");
            lock.lock();
            try {
                Map<?, ?> info = infoMap(srv.cmd("LOCK.INFO", "app:orders:7"));
                assertEquals("exclusive", String.valueOf(info.get("mode")), "held on the server under the prefix: " + info);
                assertFalse(pool.submit(() -> registry.obtain("orders:7").tryLock()).get(30, TimeUnit.SECONDS), "another thread is excluded");
                Future<Boolean> waiter = pool.submit(() -> {
                    Lock l = registry.obtain("orders:7");
                    boolean got = l.tryLock(10, TimeUnit.SECONDS);
                    if (got) {
                        l.unlock();
                    }
                    return got;
                });
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                while (((List<?>) srv.cmd("LOCK.WAITERS", "app:orders:7")).isEmpty()) {
                    assertTrue(System.nanoTime() < until, "the waiter queued on the server");
                    Thread.sleep(10);
                }
                lock.unlock();
                assertTrue(waiter.get(30, TimeUnit.SECONDS), "handed over to the waiter");
            } finally {
                pool.shutdownNow();
            }
            assertEquals(0L, srv.cmd("EXISTS", "app:orders:7"));
            String got = registry.executeLocked("job", () -> String.valueOf(srv.cmd("EXISTS", "app:job")));
            assertEquals("1", got, "executeLocked ran under the lock");
            assertEquals(0L, srv.cmd("EXISTS", "app:job"));
        }
        assertThrows(RuntimeException.class, () -> relock.acquire("after-close"), "the context closed the Relock");
    }

    @Test
    void aJedisConnectionFactoryWorksToo() throws Exception {
        try (ConfigurableApplicationContext ctx = run(JedisApp.class)) {
            LockRegistry<?> registry = ctx.getBean(LockRegistry.class);
            Lock lock = registry.obtain("j");
            // tryLock() answers false when the server did not answer in time, and the first
            // call opens the pool's first connection: on a busy machine that took longer
            // (CI, 2026-12-02). A bounded wait asks again.
            assertTrue(lock.tryLock(30, TimeUnit.SECONDS));
            assertEquals(1L, srv.cmd("EXISTS", "app:j"));
            lock.unlock();
            assertEquals(0L, srv.cmd("EXISTS", "app:j"));
        }
    }

    /**
     * Found in the Java review (2026-12-02, finding 3): a static master/replica factory keeps
     * a default standalone configuration of localhost:6379, and the Relock was made from it:
     * every host with a local Redis locked on its own. It is refused, naming the configuration.
     */
    @Test
    void aStaticMasterReplicaFactoryIsRefusedNotLockedOnLocalhost() {
        LettuceConnectionFactory f = new LettuceConnectionFactory(
            new RedisStaticMasterReplicaConfiguration("127.0.0.1", srv.port));
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> RelockSpring.relockFor(f));
        assertTrue(e.getMessage().contains("RedisStaticMasterReplicaConfiguration"), e.getMessage());
        LettuceConnectionFactory standalone = new LettuceConnectionFactory(new RedisStandaloneConfiguration("127.0.0.1", srv.port));
        // A node timeout for a loaded machine: this JVM's first Lettuce connect (Netty's event
        // loops, class loading) took over the default 1 s in a make test at load 12.
        try (Relock r = RelockSpring.relockFor(standalone, Relock.Settings.defaults().nodeTimeout(java.time.Duration.ofSeconds(10)))) {
            assertNotNull(r.acquire("static-check"));
            assertEquals(1L, srv.cmd("EXISTS", "static-check"));
        }
    }

    @Test
    void withoutARedisConnectionFactoryNothingIsMade() {
        try (ConfigurableApplicationContext ctx = run(NoRedisApp.class)) {
            assertTrue(ctx.getBeansOfType(Relock.class).isEmpty());
            assertTrue(ctx.getBeansOfType(LockRegistry.class).isEmpty());
        }
    }

    static Map<?, ?> infoMap(Object reply) {
        List<?> l = (List<?>) reply;
        Map<Object, Object> m = new java.util.HashMap<>();
        for (int i = 0; i + 1 < l.size(); i += 2) {
            m.put(String.valueOf(l.get(i)), l.get(i + 1));
        }
        return m;
    }
}
