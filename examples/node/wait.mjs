// Waiting without polling: a lock's waiters queue in the server, first in, first out.
//
// A holder keeps the lock for 200 ms; a waiter asks for it with `wait: 5_000` and is handed the
// lock (with a new, larger token) the moment it is released, without polling (LOCK.WAIT, on a
// connection of its own, so other commands do not queue behind it). A third worker that will
// wait only 300 ms gives up with a NotAcquiredError.
//
//   node examples/node/wait.mjs         # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import Redis from "ioredis";
import { NotAcquiredError, Relock } from "relock";

// Gives up reconnecting after about 1.5 s, so that without a server the example fails rather
// than retrying forever (a service would keep ioredis's default: retry without end).
const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379", {
  retryStrategy: (attempt) => (attempt > 5 ? null : attempt * 100),
});
const locks = new Relock(redis);
const key = `report:daily:${randomUUID().slice(0, 8)}`;

const holder = await locks.acquire(key, { ttl: 10_000, wait: 0 });
if (holder === null) throw new Error("holder: the lock was not free");
console.log(`holder: token ${holder.token}`);

async function finishWork() {
  await sleep(200); // the holder's work
  const deadline = Date.now() + 10_000;
  while ((await locks.info(key)).waiters === 0 && Date.now() < deadline) {
    await sleep(5); // for the demo: let go only once the waiter is queued
  }
  console.log(`holder: release() -> ${await holder.release()} (someone is waiting: handed over)`);
}

let started = performance.now();
const finishing = finishWork();
await locks.using(key, { ttl: 10_000, wait: 5_000 }, async (hold) => {
  const waitedMs = Math.round(performance.now() - started);
  await finishing;
  console.log(`waiter: waited ${waitedMs} ms then got token ${hold.token}`);

  started = performance.now();
  try {
    await locks.using(key, { ttl: 10_000, wait: 300 }, () => {
      throw new Error("impatient: granted a lock that the waiter holds");
    });
  } catch (e) {
    if (!(e instanceof NotAcquiredError)) throw e;
    const gaveUpMs = Math.round(performance.now() - started);
    console.log(`impatient: gave up after ${gaveUpMs} ms: ${e.message} (retryable: ${e.retryable})`);
  }
});
console.log(`waiter: released; locks.info() -> ${await locks.info(key)}`);
await locks.close(); // also closes the connections the waits used
await redis.quit();
