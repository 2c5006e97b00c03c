// Fencing: every write carries the lock's token, and the store refuses a stale one.
//
// worker-a takes the lock, writes, then stalls (a long GC pause, a blocked event loop) past its
// ttl. worker-b gets the lock with a larger token and writes. When worker-a wakes up and writes
// as if it still held the lock, the store refuses it: its token is older than the last one.
//
//   node examples/node/fencing.mjs      # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { connect, Lock } from "./relock.mjs";

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

const redis = connect();
const ledger = new Ledger();
const key = `account:acct-7:${randomUUID().slice(0, 8)}`;

const a = new Lock(redis, key, { ttlMs: 200 });
const tokenA = await a.acquire();
console.log(`worker-a: token ${tokenA}`);
let balance = ledger.balance;
if (!ledger.setBalance(balance + 50, tokenA)) throw new Error("the ledger refused worker-a's first write");
console.log(`worker-a: write accepted, balance ${balance} -> ${balance + 50}`);

await sleep(400); // worker-a stalls for longer than its 200 ms ttl: the lock expires
console.log("worker-a: paused 400 ms, longer than its 200 ms ttl");

const b = new Lock(redis, key, { ttlMs: 10_000 });
const tokenB = await b.wait(5_000);
if (tokenB === null) throw new Error("worker-b did not get the expired lock");
console.log(`worker-b: token ${tokenB}`);
balance = ledger.balance;
if (!ledger.setBalance(balance + 50, tokenB)) throw new Error("the ledger refused worker-b's write");
console.log(`worker-b: write accepted, balance ${balance} -> ${balance + 50}`);

// worker-a wakes up and carries on as if it still held the lock.
if (ledger.setBalance(1_000_000, tokenA)) throw new Error("the ledger accepted a stale write");
console.log(`worker-a: stale write with token ${tokenA} rejected`);
console.log(`worker-a: release -> ${await a.release()} (it no longer holds the lock)`);

console.log(`worker-b: release -> ${await b.release()}`);
console.log(`balance ${ledger.balance}`);
await redis.quit();
