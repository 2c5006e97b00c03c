// relock's Node package against redlock v5 and @sesamecare-oss/redlock, on one server:
// uncontended acquire+release per second, and hand-off latency with 10 contending workers.
// Prints one JSON line per peer. Usage: node bench.mjs PORT SECONDS HANDOFFS
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const Redis = require("ioredis").default;
const { Relock } = require("../../clients/node/dist/index.js");
const RedlockV5 = require("redlock").default;
const { Redlock: SesameRedlock } = require("@sesamecare-oss/redlock");

const [port, seconds, handoffs] = process.argv.slice(2).map(Number);
const r = new Redis(port);

const peers = {
  "relock (LOCK.WAIT, renewal timer)": () => {
    const locks = new Relock(r);
    return (key, fn) => locks.using(key, { ttl: 30_000 }, fn);
  },
  // Both redlocks poll: retry every 200 ms (+ up to 200 ms jitter); retryCount -1 retries
  // without end, as a waiting worker needs.
  "redlock 5.0.0-beta.2 (SET NX + Lua, polls)": () => {
    const rl = new RedlockV5([r], { retryCount: -1 });
    return (key, fn) => rl.using([key], 30_000, { automaticExtensionThreshold: 500 }, fn);
  },
  "@sesamecare-oss/redlock 1.4.0 (SET NX + Lua, polls)": () => {
    const rl = new SesameRedlock([r], { retryCount: -1 });
    return (key, fn) => rl.using([key], 30_000, fn);
  },
};

async function uncontended(make, secs) {
  const using = make();
  let n = 0;
  const start = performance.now();
  const end = start + secs * 1000;
  while (performance.now() < end) {
    await using("bench:uncontended", async () => {});
    n++;
  }
  return n / ((performance.now() - start) / 1000);
}

async function handoff(make) {
  const using = make();
  const key = `bench:handoff:${process.hrtime.bigint()}`;
  const lat = [];
  let released = null;
  let left = handoffs;
  let holder = null; // the worker whose body ran last
  let stepping = []; // workers waiting for another to take the lock
  const worker = async (_, me) => {
    while (left > 0) {
      // A hand-off passes the lock to another worker: one that has just released steps aside
      // until another took it, so a lock that lets its releaser take it straight back (every
      // polling peer) is measured on its hand-offs, not on re-acquisitions by the same worker.
      while (holder === me && left > 0) await new Promise((res) => stepping.push(res));
      if (left <= 0) break;
      await using(key, async () => {
        const now = performance.now();
        if (released !== null) lat.push(now - released);
        left--;
        holder = me;
        const wake = stepping;
        stepping = [];
        for (const res of wake) res();
        await new Promise((res) => setTimeout(res, 1));
        released = performance.now();
      });
    }
    for (const res of stepping.splice(0)) res();
  };
  await Promise.all(Array.from({ length: 10 }, worker));
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))];
  return [q(50), q(99), lat.length];
}

// Warm every peer up first (the JIT), so that the first measured is not the coldest.
const measured = seconds;
for (const make of Object.values(peers)) await uncontended(make, 1);
for (const [name, make] of Object.entries(peers)) {
  const ops = await uncontended(make, measured);
  const [p50, p99, n] = await handoff(make);
  console.log(JSON.stringify({ lang: "Node", peer: name, ops, p50_ms: p50, p99_ms: p99, handoffs: n }));
}
r.disconnect();
process.exit(0);
