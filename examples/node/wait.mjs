// Waiting without polling: LOCK.WAIT queues until the holder lets go, or gives up after a timeout.
//
// A holder keeps the lock for 200 ms; a waiter queues with LOCK.WAIT and is handed the lock (with
// a new, larger token) the moment it is released. A third client that waits only 300 ms gives up.
//
//   node examples/node/wait.mjs         # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { connect, Lock, lockInfo } from "./relock.mjs";

const redis = connect();
// LOCK.WAIT blocks the connection it is sent on: waiters get clients of their own.
const waiting = redis.duplicate();
const key = `report:daily:${randomUUID().slice(0, 8)}`;

const holder = new Lock(redis, key, { ttlMs: 10_000 });
console.log(`holder: token ${await holder.acquire()}`);

async function finishWork() {
  await sleep(200); // the holder's work
  const deadline = Date.now() + 10_000;
  while ((await lockInfo(redis, key)).waiters === 0 && Date.now() < deadline) {
    await sleep(5); // for the demo: let go only once the waiter is queued
  }
  console.log(`holder: release -> ${await holder.release()} (someone is waiting: handed over)`);
}

const waiter = new Lock(redis, key, { ttlMs: 10_000 });
let started = performance.now();
const [token] = await Promise.all([waiter.wait(5_000, waiting), finishWork()]);
const waitedMs = Math.round(performance.now() - started);
if (token === null) throw new Error(`waiter: not granted within 5000 ms (waited ${waitedMs} ms)`);
console.log(`waiter: waited ${waitedMs} ms then got token ${token}`);

const impatient = new Lock(redis, key, { ttlMs: 10_000 });
started = performance.now();
if ((await impatient.wait(300, waiting)) !== null) {
  throw new Error("impatient: granted a lock that the waiter holds");
}
console.log(`impatient: gave up after ${Math.round(performance.now() - started)} ms (LOCK.WAIT answered nil)`);

console.log(`waiter: release -> ${await waiter.release()}`);
console.log(`LOCK.INFO -> ${JSON.stringify(await lockInfo(redis, key))}`);
await Promise.all([redis.quit(), waiting.quit()]);
