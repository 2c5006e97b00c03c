// Leader election: candidates queue for one key, the holder leads, its term is its token.
//
// node-a campaigns and leads; node-b campaigns (queued behind it); an observer follows the
// leaders. node-a resigns: node-b leads in the same step, with a larger term. node-b resigns,
// and the observer has seen every leader.
//
//   node examples/node/election.mjs     # against $REDIS_URL (default redis://127.0.0.1:6379)

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import Redis from "ioredis";
import { Relock } from "relock";

// Gives up reconnecting after about 1.5 s, so that without a server the example fails rather
// than retrying forever (a service would keep ioredis's default: retry without end).
const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379", {
  retryStrategy: (attempt) => (attempt > 5 ? null : attempt * 100),
});
const locks = new Relock(redis);
const key = `service:leader:${randomUUID().slice(0, 8)}`;

// The observer: every leader, until nobody leads after node-b.
const seen = [];
const observer = (async () => {
  for await (const change of locks.observe(key)) {
    seen.push(change.leader === null ? "nobody" : `${change.leader.value} (term ${change.leader.term})`);
    if (seen.length === 4) break;
  }
})();
const seenBy = Date.now() + 10_000;
while (seen.length === 0 && Date.now() < seenBy) await sleep(5); // for the demo: campaign once the observer has seen that nobody leads

const a = await locks.campaign(key, "node-a", { ttl: 10_000 });
console.log(`node-a: leads, term ${a.term}`);

const bLeads = locks.campaign(key, "node-b", { ttl: 10_000 });
const deadline = Date.now() + 10_000;
let lead;
while ((lead = await locks.leader(key)) !== null && lead.waiters === 0 && Date.now() < deadline) {
  await sleep(5); // for the demo: resign only once node-b is queued
}
console.log(`node-b: queued behind ${lead?.value ?? null}`);

console.log(`node-a: resign() -> ${await a.resign()}`);
lead = await locks.leader(key);
console.log(`leader() right after: ${lead?.value ?? null}, term ${lead?.term ?? 0}`);
const b = await bLeads;
console.log(`node-b: leads, term ${b.term}`);
while (seen.length < 3 && Date.now() < deadline + 10_000) await sleep(5); // for the demo: resign once the observer has seen node-b lead
await b.resign();
await observer;
console.log(`observer saw: ${seen.join(", ")}`);
console.log(`leader() -> ${await locks.leader(key)}`);
await locks.close(); // also closes the connections the waits used
await redis.quit();
