/**
 * relock on Lettuce: {@link dev.relock.lettuce.RelockLettuce} makes a {@link dev.relock.Relock}
 * for one server, a Redis Cluster or Redlock masters; {@link dev.relock.lettuce.LettuceTransport}
 * is the adapter (connections of its own without auto-reconnect, so nothing is ever re-sent,
 * and without a command timeout on blocking commands).
 */
package dev.relock.lettuce;
