package dev.relock.spring;

import dev.relock.Relock;
import java.time.Duration;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.context.annotation.Bean;
import org.springframework.core.env.Environment;
import org.springframework.data.redis.connection.RedisConnectionFactory;
import org.springframework.integration.support.locks.LockRegistry;

/**
 * Spring Boot auto-configuration: when a {@link RedisConnectionFactory} (Lettuce or Jedis) is
 * present, a {@link Relock} on its server (unless one is defined) and a
 * {@link RelockLockRegistry} (unless a {@link LockRegistry} is defined). Properties:
 * {@code relock.registry.prefix} (default empty), {@code relock.registry.ttl} (default 30s),
 * {@code relock.node-timeout} (default 100ms).
 */
@AutoConfiguration(afterName = {
    "org.springframework.boot.data.redis.autoconfigure.DataRedisAutoConfiguration",
    "org.springframework.boot.autoconfigure.data.redis.RedisAutoConfiguration"})
@ConditionalOnClass({Relock.class, RedisConnectionFactory.class, LockRegistry.class})
@ConditionalOnBean(RedisConnectionFactory.class)
public class RelockAutoConfiguration {

    @Bean(destroyMethod = "close")
    @ConditionalOnMissingBean
    public Relock relock(RedisConnectionFactory factory, Environment env) {
        Duration nodeTimeout = env.getProperty("relock.node-timeout", Duration.class, Duration.ofMillis(100));
        return RelockSpring.relockFor(factory, Relock.Settings.defaults().nodeTimeout(nodeTimeout));
    }

    @Bean
    @ConditionalOnMissingBean(LockRegistry.class)
    public RelockLockRegistry relockLockRegistry(Relock relock, Environment env) {
        return new RelockLockRegistry(relock, env.getProperty("relock.registry.prefix", ""),
            env.getProperty("relock.registry.ttl", Duration.class, Duration.ofSeconds(30)));
    }
}
