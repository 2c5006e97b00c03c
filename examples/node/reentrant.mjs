// Reentrancy: code that holds a lock can call code that takes the same lock again.
//
// saveOrder() holds the order's lock and calls updateStock(), which enters it again through the
// hold (`hold.reenter(fn)`): the server counts the entries (1, 2), each exit gives one back
// (1, 0), and the hold keeps one token throughout. Reentrancy is only ever asked for this way:
// any other acquisition, even from the same task, is another owner and is refused. A bad
// argument is refused before any server is asked.
//
//   node examples/node/reentrant.mjs    # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import Redis from "ioredis";
import { InvalidArgumentError, Relock } from "relock";

async function updateStock(locks, hold) {
  await hold.reenter(async (count) => {
    console.log(`updateStock: count ${count}, token ${(await locks.info(hold.key)).token}`);
    console.log(`another owner: locks.acquire({ wait: 0 }) -> ${await locks.acquire(hold.key, { wait: 0 })}`);
  });
}

async function saveOrder(locks, key) {
  await locks.using(key, { ttl: 10_000 }, async (hold) => {
    console.log(`saveOrder: count ${(await locks.info(key)).count}, token ${hold.token}`);
    await updateStock(locks, hold);
    console.log(`saveOrder: back to count ${(await locks.info(key)).count}`);
  });
  console.log(`saveOrder: done, locks.info() -> ${await locks.info(key)}`);
}

// Gives up reconnecting after about 1.5 s, so that without a server the example fails rather
// than retrying forever (a service would keep ioredis's default: retry without end).
const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379", {
  retryStrategy: (attempt) => (attempt > 5 ? null : attempt * 100),
});
const locks = new Relock(redis);
const key = `orders:42:${randomUUID().slice(0, 8)}`;
await saveOrder(locks, key);
try {
  await locks.acquire(key, { ttl: 0 });
  throw new Error("a ttl of 0 was accepted");
} catch (e) {
  if (!(e instanceof InvalidArgumentError)) throw e;
  console.log(`ttl 0: ${e.name}: ${e.message} (retryable: ${e.retryable})`);
}
await locks.close();
await redis.quit();
