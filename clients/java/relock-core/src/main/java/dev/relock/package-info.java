/**
 * relock for Java: distributed locks kept by the relock Redis module (the LOCK.* commands).
 *
 * <p>{@link dev.relock.Relock} takes locks on one server, a Redis Cluster, or Redlock over
 * independent masters, through a {@link dev.relock.Transport} (one adapter per driver:
 * relock-jedis). A {@link dev.relock.Hold} is renewed every ttl/3 on relock's own threads
 * until released or lost; {@link dev.relock.Hold#lost()} completes with the reason the
 * server's journal gives. The client rules (the Redlock round, validity, classification of
 * failures, reply decoding) are the shared ones of spec/client-cases, run by this module's tests.
 *
 * <pre>{@code
 * try (Relock locks = RelockJedis.create(RedisClient.create("127.0.0.1", 6379));
 *      Hold hold = locks.acquire("orders:7", LockOptions.ttl(Duration.ofSeconds(30)).waitAtMost(Duration.ofSeconds(5)))) {
 *     hold.fenced("INCR", "orders:7:version");   // runs only while the hold's token is live
 * }
 * }</pre>
 */
package dev.relock;
