// Renewal: a job that runs longer than its lock's ttl keeps the lock, and learns of its loss.
//
// First a 6 s job under a 3 s lease: the package renews the hold in the background every
// ttl/3 (1 s), so the job keeps its lock, and its token, to the end; `using` releases it when
// the job returns. Then the same job again, but an operator breaks the lock (LOCK.FORCERELEASE)
// 500 ms in: the next renewal is refused and `hold.signal` is aborted with a LockLostError that
// says why. The job hands the signal to what it awaits, so it stops at once instead of carrying
// on unprotected.
//
//   node examples/node/renew.mjs        # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import Redis from "ioredis";
import { LockLostError, Relock } from "relock";

const TTL = 3_000;
const JOB = 6_000;
const STEPS = 25;

/**
 * A long job in small steps, each given the hold's signal (timers, fetch and streams take one):
 * it throws the LockLostError once the lock is lost. Returns how many times the hold's validity
 * moved on (each renewal moves it).
 */
async function job(hold) {
  let extended = 0;
  let validUntil = hold.validUntil;
  for (let step = 0; step < STEPS; step += 1) {
    try {
      await sleep(JOB / STEPS, undefined, { signal: hold.signal });
    } catch {
      throw hold.signal.reason; // the LockLostError
    }
    if (hold.validUntil !== validUntil) [extended, validUntil] = [extended + 1, hold.validUntil];
  }
  return extended;
}

// Gives up reconnecting after about 1.5 s, so that without a server the example fails rather
// than retrying forever (a service would keep ioredis's default: retry without end).
const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379", {
  retryStrategy: (attempt) => (attempt > 5 ? null : attempt * 100),
});
const locks = new Relock(redis);
const key = `jobs:nightly:${randomUUID().slice(0, 8)}`;

// 1. The lease outlives its ttl because it is renewed.
await locks.using(key, { ttl: TTL, wait: 5_000 }, async (hold) => {
  console.log(`token ${hold.token}, ttl ${TTL} ms, job ${JOB} ms`);
  const extended = await job(hold);
  const info = await locks.info(key);
  if (info?.token !== hold.token) throw new Error(`the lock was not kept: ${JSON.stringify(info)}`);
  console.log(`renewed ${extended} times; still held after the job, same token`);
});
console.log(`released: locks.info() -> ${await locks.info(key)}`);

// 2. An operator breaks the lock while the job runs: the renewal reports the loss.
let broken;
const started = performance.now();
try {
  await locks.using(key, { ttl: TTL, wait: 5_000 }, async (hold) => {
    console.log(`token ${hold.token}`);
    broken = sleep(500).then(() => locks.forceRelease(key));
    await job(hold);
  });
  throw new Error("the job ran to its end under a broken lock");
} catch (e) {
  if (!(e instanceof LockLostError)) throw e;
  const elapsedMs = Math.round(performance.now() - started);
  console.log(`operator: forceRelease() -> ${await broken} (at 500 ms)`);
  console.log(`lost: ${e.reason}`);
  console.log(`job stopped after ${elapsedMs} ms (retryable: ${e.retryable}: acquire again)`);
}
console.log(`locks.info() -> ${await locks.info(key)}`);
await locks.close(); // waits for the releases the package runs in the background
await redis.quit();
