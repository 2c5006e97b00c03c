// Renewal: a job that runs longer than its lock's ttl keeps the lock alive, and learns of its loss.
//
// First a 2.5 s job under a 1.2 s lease: a renewal loop renews it every 400 ms, stops when the job
// is done, and the lock is released. Then the same job again, but an operator breaks the lock
// (LOCK.FORCERELEASE) from another connection after 500 ms: the next renewal answers nil, the
// renewal aborts its signal with a LockLostError, and the job stops instead of carrying on.
//
//   node examples/node/renew.mjs        # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { connect, Lock, lockInfo } from "./relock.mjs";

const TTL_MS = 1_200;
const JOB_MS = 2_500;

/** A long job in small steps; it stops when the signal says the lock is lost. */
async function job(signal, steps = 25) {
  for (let step = 0; step < steps; step += 1) {
    try {
      await sleep(JOB_MS / steps, undefined, { signal });
    } catch {
      return step;
    }
  }
  return steps;
}

const redis = connect();
const key = `jobs:nightly:${randomUUID().slice(0, 8)}`;

// 1. The lease outlives its ttl because it is renewed.
let lock = new Lock(redis, key, { ttlMs: TTL_MS });
const token = await lock.wait(5_000);
console.log(`token ${token}, ttl ${TTL_MS} ms, job ${JOB_MS} ms`);
let renewal = lock.keepAlive();
await job(renewal.signal);
await renewal.stop();
const info = await lockInfo(redis, key);
if (info === null || info.token !== token) throw new Error(`the lock was not kept: ${JSON.stringify(info)}`);
console.log(`renewed ${renewal.renewals} times; still held after the job, same token`);
await lock.release();
console.log(`released -> LOCK.INFO ${JSON.stringify(await lockInfo(redis, key))}`);
const count = renewal.renewals;
await sleep(500);
console.log(`renewal stopped: ${renewal.renewals - count} renewals after the release`);

// 2. An operator breaks the lock while the job runs: the renewal reports the loss.
lock = new Lock(redis, key, { ttlMs: TTL_MS });
console.log(`token ${await lock.acquire()}`);
const admin = redis.duplicate();
const broken = sleep(500).then(() => admin.call("LOCK.FORCERELEASE", key));
const started = performance.now();
renewal = lock.keepAlive();
const steps = await job(renewal.signal);
await renewal.stop();
const elapsedMs = Math.round(performance.now() - started);
if (!renewal.signal.aborted) throw new Error("the renewal did not notice that the lock was broken");
console.log(`operator: LOCK.FORCERELEASE -> ${await broken} (at 500 ms)`);
console.log(`lost: ${renewal.signal.reason.message}`);
console.log(`job stopped after ${elapsedMs} ms (${steps} of 25 steps); renewals before the loss: ${renewal.renewals}`);
console.log(`release -> ${await lock.release()} (nothing to release)`);
console.log(`LOCK.INFO -> ${JSON.stringify(await lockInfo(redis, key))}`);
await Promise.all([redis.quit(), admin.quit()]);
