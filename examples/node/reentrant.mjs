// Reentrancy: code that holds a lock can call code that takes the same lock again.
//
// saveOrder() holds the order's lock and calls updateStock(), which takes it too: LOCK.REENTER
// counts the entries (1, 2), each exit releases one (1, 0), and the hold keeps one token
// throughout. Meanwhile another owner is refused, and a bad argument comes back as an error reply.
//
//   node examples/node/reentrant.mjs    # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import { connect, Lock, lockInfo } from "./relock.mjs";

async function updateStock(lock) {
  await lock.reentered(async (count) => {
    const info = await lockInfo(lock.redis, lock.key);
    console.log(`updateStock: count ${count}, token ${info.token}`);
    const other = new Lock(lock.redis, lock.key);
    console.log(`another owner: LOCK.REENTER -> ${await other.reenter()}`);
  });
}

async function saveOrder(lock) {
  await lock.reentered(async (count) => {
    const info = await lockInfo(lock.redis, lock.key);
    console.log(`saveOrder: count ${count}, token ${info.token}`);
    await updateStock(lock);
    console.log(`saveOrder: back to count ${(await lockInfo(lock.redis, lock.key)).count}`);
  });
  console.log(`saveOrder: done, LOCK.INFO -> ${JSON.stringify(await lockInfo(lock.redis, lock.key))}`);
}

const redis = connect();
const lock = new Lock(redis, `orders:42:${randomUUID().slice(0, 8)}`, { ttlMs: 10_000 });
await saveOrder(lock);
const error = await redis.call("LOCK.REENTER", lock.key, lock.owner, 0).then(() => null, (e) => e);
if (error === null) throw new Error("LOCK.REENTER with ttl 0 was accepted");
console.log(`ttl 0: error ${error.message}`);
await redis.quit();
