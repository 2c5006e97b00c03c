/**
 * relock on Jedis: {@link dev.relock.jedis.RelockJedis} makes a {@link dev.relock.Relock} for one
 * server, a Redis Cluster or Redlock masters; {@link dev.relock.jedis.JedisTransport} is the
 * adapter (connections of its own, no driver retry, no socket timeout on blocking commands).
 */
package dev.relock.jedis;
