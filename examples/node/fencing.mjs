// Fencing: every write carries the lock's token, and the store refuses a stale one.
//
// worker-a takes the lock, writes, then stalls past its ttl (a long synchronous computation
// blocks its event loop: not even the renewal timer runs), and the lock expires. worker-b gets
// the lock with a larger token and writes. When worker-a wakes up and writes as if it still
// held the lock, the store refuses it: its token is older than the last one. worker-a's hold
// knows it is lost, too (`hold.lost`, `hold.signal`), but only the token protects a write
// already on its way.
//
//   node examples/node/fencing.mjs      # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import Redis from "ioredis";
import { Relock } from "relock";

/** The protected resource: it remembers the highest token that wrote to it. */
class Ledger {
  balance = 100;
  fence = 0;

  /** The write lands only with a token at least as high as every token before it. */
  setBalance(balance, token) {
    if (token < this.fence) return false;
    this.balance = balance;
    this.fence = token;
    return true;
  }
}

/** Blocks the event loop for `ms`, as a long synchronous computation would. */
function stall(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

// Gives up reconnecting after about 1.5 s, so that without a server the example fails rather
// than retrying forever (a service would keep ioredis's default: retry without end).
const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379", {
  retryStrategy: (attempt) => (attempt > 5 ? null : attempt * 100),
});
const locks = new Relock(redis);
const ledger = new Ledger();
const key = `account:acct-7:${randomUUID().slice(0, 8)}`;

const a = await locks.acquire(key, { ttl: 200, wait: 0 }); // renewed every ttl/3 while held
if (a === null) throw new Error("worker-a did not get a free lock");
console.log(`worker-a: token ${a.token}`);
let balance = ledger.balance;
if (!ledger.setBalance(balance + 50, a.token)) throw new Error("the ledger refused worker-a's first write");
console.log(`worker-a: write accepted, balance ${balance} -> ${balance + 50}`);

stall(400); // longer than the 200 ms ttl, and no renewal ran: the lock expires
console.log("worker-a: stalled 400 ms, longer than its 200 ms ttl");

// Another worker (every hold has an owner of its own, so one Relock serves both).
await locks.using(key, { ttl: 10_000, wait: 5_000 }, async (b) => {
  console.log(`worker-b: token ${b.token}`);
  balance = ledger.balance;
  if (!ledger.setBalance(balance + 50, b.token)) throw new Error("the ledger refused worker-b's write");
  console.log(`worker-b: write accepted, balance ${balance} -> ${balance + 50}`);

  // worker-a wakes up and carries on as if it still held the lock.
  if (ledger.setBalance(1_000_000, a.token)) throw new Error("the ledger accepted a stale write");
  console.log(`worker-a: stale write with token ${a.token} rejected`);
  if (!a.lost) throw new Error("worker-a's hold does not know it is lost");
  console.log(`worker-a: its hold knows it is lost: ${a.reason}`);
  console.log(`worker-a: release() -> ${await a.release()} (it no longer holds the lock)`);
});
console.log(`worker-b: released; balance ${ledger.balance}`);
await locks.close(); // waits for the releases the package runs in the background
await redis.quit();
