// relock from Node.js with ioredis: a lock with a fencing token, waiting, renewal and
// reentrancy. A thin layer that sends relock's LOCK.* commands; copy it into your project.
//
//   import { connect, Lock } from "./relock.mjs";
//   const lock = new Lock(connect(), "orders:42", { ttlMs: 10_000 });
//   const token = await lock.wait(5_000);           // null if not granted within 5 s
//   await store.write(data, { fence: token });
//   await lock.release();

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import Redis from "ioredis";

/** What `make run` starts. */
export const DEFAULT_URL = "redis://127.0.0.1:6379";

/**
 * A client for $REDIS_URL, else the server `make run` starts. It gives up reconnecting after
 * about 1.5 s, so that an example without a server fails instead of retrying forever (a service
 * would rather keep ioredis's default: retry without end).
 */
export function connect(url = process.env.REDIS_URL || DEFAULT_URL) {
  return new Redis(url, { retryStrategy: (attempt) => (attempt > 5 ? null : attempt * 100) });
}

/**
 * LOCK.INFO's reply as an object: a flat [name, value, ...] array under RESP2 and under RESP3
 * with ioredis's default reply mapping, an object with `replyMapping: "resp3"`.
 */
export function infoFromReply(reply) {
  if (reply === null) return null;
  if (!Array.isArray(reply)) return { ...reply };
  const info = {};
  for (let i = 0; i + 1 < reply.length; i += 2) info[reply[i]] = reply[i + 1];
  return info;
}

/** LOCK.INFO key: null when there is no lock, else owner, token, count, ttl and waiters. */
export async function lockInfo(redis, key) {
  return infoFromReply(await redis.call("LOCK.INFO", key));
}

/** The lock ended while its holder was still working under it. */
export class LockLostError extends Error {
  name = "LockLostError";
}

/**
 * One owner's hold on one key. `owner` is the proof of ownership (a fresh UUID unless given);
 * `ttlMs` is the lease, which keepAlive() renews for work that takes longer.
 */
export class Lock {
  constructor(redis, key, { ttlMs = 10_000, owner = randomUUID() } = {}) {
    this.redis = redis;
    this.key = key;
    this.ttlMs = ttlMs;
    this.owner = owner;
    this.token = null;
  }

  /** LOCK.ACQUIRE, without waiting: the fencing token, or null if someone else holds it. */
  async acquire() {
    this.token = await this.redis.call("LOCK.ACQUIRE", this.key, this.owner, this.ttlMs);
    return this.token;
  }

  /**
   * LOCK.WAIT: queue (first in, first out) until granted, then the token; null once timeoutMs
   * passes (0 waits without limit). It blocks the connection it is sent on, and ioredis sends
   * every command of a client down one connection: wait on a client of its own
   * (`redis.duplicate()`), so that other commands do not queue behind the wait.
   */
  async wait(timeoutMs, connection = this.redis) {
    this.token = await connection.call("LOCK.WAIT", this.key, this.owner, this.ttlMs, timeoutMs);
    return this.token;
  }

  /** LOCK.REENTER: the reentrancy count after this entry, or null if someone else holds it. */
  async reenter() {
    return this.redis.call("LOCK.REENTER", this.key, this.owner, this.ttlMs);
  }

  /** LOCK.RENEW: true if still held (its lease is ttlMs again), false if it is gone. */
  async renew() {
    return (await this.redis.call("LOCK.RENEW", this.key, this.owner, this.ttlMs)) !== null;
  }

  /**
   * LOCK.RELEASE: the count left (0: released, and handed to the first waiter), or null when
   * this owner does not hold it (expired, broken, never held).
   */
  async release() {
    return this.redis.call("LOCK.RELEASE", this.key, this.owner);
  }

  /** A reentrant section: LOCK.REENTER, then fn(count), then LOCK.RELEASE (count - 1). */
  async reentered(fn) {
    const count = await this.reenter();
    if (count === null) throw new Error(`${this.key} is held by another owner`);
    try {
      return await fn(count);
    } finally {
      await this.release();
    }
  }

  /** Starts renewing every `everyMs` (default ttl/3) until stop() or the lock is lost. */
  keepAlive({ everyMs = Math.max(1, Math.floor(this.ttlMs / 3)) } = {}) {
    return new Renewal(this, everyMs);
  }
}

/**
 * Keeps a lock alive with LOCK.RENEW until stop() or the lock is lost. When a renewal answers
 * null, the lock is gone (it expired, an operator broke it, the key was deleted): `signal` is
 * aborted with a LockLostError. Hand the signal to the work (fetch, timers and streams take one)
 * or check `signal.aborted` between steps. Await stop() before releasing, so that no renewal
 * races the release.
 */
export class Renewal {
  #lock;
  #everyMs;
  #lost = new AbortController();
  #stopped = new AbortController();
  #loop;

  constructor(lock, everyMs) {
    this.#lock = lock;
    this.#everyMs = everyMs;
    this.renewals = 0;
    this.signal = this.#lost.signal;
    this.#loop = this.#run();
  }

  async stop() {
    this.#stopped.abort();
    await this.#loop;
  }

  async #run() {
    let lastRenewed = Date.now();
    for (;;) {
      try {
        await sleep(this.#everyMs, undefined, { signal: this.#stopped.signal });
      } catch {
        return; // stopped
      }
      let reason;
      try {
        if (await this.#lock.renew()) {
          this.renewals += 1;
          lastRenewed = Date.now();
          continue;
        }
        reason = "LOCK.RENEW answered nil: the lock expired or was taken away";
      } catch (error) {
        // A dropped connection or a lost reply: the lease may still run, so try again until it
        // must have ended.
        if (Date.now() - lastRenewed < this.#lock.ttlMs) continue;
        reason = `could not renew for ${this.#lock.ttlMs} ms: ${error.message}`;
      }
      if (this.#stopped.signal.aborted) return;
      this.#lost.abort(new LockLostError(`${this.#lock.key}: ${reason}`));
      return;
    }
  }
}
