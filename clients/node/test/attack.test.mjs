// Attacks on the Node package: each test says what it attacks and what must hold. They are
// regression tests: some attacks found a break in the package (fixed since), the others are
// attacks the package held, kept as cheap checks.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { spawn } from "node:child_process";
import { after, test } from "node:test";
import process from "node:process";

import { Server, eventually, modulePath, sleep } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock, NotAcquiredError, LockLostError, ServerError, InvalidArgumentError } = require("../dist/index.js");
const Redis = require("ioredis").default;

const opened = [];
function connect(server, protocol = 3, extra = {}) {
  const r = new Redis({ port: server.port, host: "127.0.0.1", protocol, maxRetriesPerRequest: 2, ...extra });
  opened.push(r);
  return r;
}
const made = [];
/** A Relock closed when its test ends, whatever the test did (the connections it opens for waits keep a process alive). */
function relock(...args) {
  const l = new Relock(...args);
  made.push(l);
  return l;
}
function closeClients() {
  for (const l of made.splice(0)) void l.close().catch(() => undefined);
  for (const r of opened.splice(0)) r.disconnect();
}
after(closeClients);

async function withServer(fn, args) {
  const s = await Server.start(args);
  try {
    return await fn(s);
  } finally {
    closeClients();
    s.close();
  }
}

async function withServers(n, fn) {
  const all = [];
  try {
    for (let i = 0; i < n; i++) all.push(await Server.start());
    return await fn(all);
  } finally {
    closeClients();
    all.forEach((s) => s.close());
  }
}

const DIST = JSON.stringify(require.resolve("../dist/index.js"));
const IOREDIS = JSON.stringify(require.resolve("ioredis"));

/** Runs `code` in a fresh node; resolves { code, signal, out, ms } or "alive" after `within` ms (then kills it). */
function runNode(code, within) {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn(process.execPath, ["-e", code], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      resolve({ alive: true, out });
    }, within);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ alive: false, code, signal, out, ms: performance.now() - started });
    });
  });
}

/** Restarts `s` on its port, empty (no persistence): SIGKILL, then a new redis-server there. */
async function restart(s) {
  s.kill();
  await eventually(() => s.exited, 5000);
  s.proc = spawn(process.env.REDIS_SERVER ?? "redis-server", ["--port", String(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
    "--save", "", "--appendonly", "no", "--logfile", "redis.log", "--loadmodule", modulePath()], { stdio: "ignore" });
  s.exited = false;
  s.proc.on("exit", () => (s.exited = true));
  const probe = new Redis({ port: s.port, lazyConnect: true, retryStrategy: () => 20, maxRetriesPerRequest: null });
  try {
    assert.ok(await eventually(async () => (await probe.ping().catch(() => "")) === "PONG", 10_000));
  } finally {
    probe.disconnect();
  }
}

const held = async (servers, key) => Promise.all(servers.map(async (s) => (await connect(s).call("LOCK.INFO", key)) !== null));

// --- a blocked event loop ------------------------------------------------------------------

test(
  "attack: after a busy loop longer than the ttl, hold.signal reads aborted before any timer runs",
  () =>
    // The signal is what the docs hand to I/O (`store.write(data, { signal: hold.signal })`),
    // which reads `signal.aborted` / `throwIfAborted()` synchronously. Must hold: right after a
    // block past the validity, the signal is aborted, as `lost` is.
    withServer(async (s) => {
      const locks = relock(connect(s));
      await locks.using("k", { ttl: 300 }, async (h) => {
        const signal = h.signal; // as handed to I/O before the block
        const end = performance.now() + 600;
        while (performance.now() < end); // no timer can run
        assert.ok(performance.now() > h.validUntil);
        assert.equal(signal.aborted, true, "a signal handed out before the block is not aborted past the validity");
        assert.equal(h.signal.aborted, true, "signal not aborted past the validity");
        assert.throws(() => h.signal.throwIfAborted(), LockLostError);
      });
      await locks.using("k2", { ttl: 300 }, async (h) => {
        const signal = h.signal;
        const end = performance.now() + 600;
        while (performance.now() < end);
        assert.throws(() => signal.throwIfAborted(), LockLostError); // the first thing read after the block
        assert.ok(signal.reason instanceof LockLostError);
      });
      await locks.close();
    }),
);

test("attack: a busy loop longer than the ttl under Redlock reads as lost, and is never renewed", () =>
  // Must hold: `lost` and check() read the clock; the expired validity is not extended.
  withServers(3, async (servers) => {
    const locks = relock(servers.map((s) => connect(s)));
    const h = await locks.acquire("b", { ttl: 300, wait: 5000 });
    const end = performance.now() + 600;
    while (performance.now() < end);
    assert.equal(h.lost, true);
    assert.equal(h.signal.aborted, true);
    assert.throws(() => h.check(), (e) => e instanceof LockLostError && /event loop/.test(e.message));
    const until = h.validUntil;
    await sleep(300);
    assert.equal(h.validUntil, until, "an expired validity was renewed");
    await locks.close();
  }));

// --- ttl and wait extremes -----------------------------------------------------------------

test(
  "attack: a ttl of 1-2 ms, which the drift alone outlasts",
  () =>
    // The documented range starts at 1 ms; drift is 1 % + 2 ms. Must hold: the call ends with
    // an InvalidArgumentError (not a retryable NotAcquiredError), never an endless loop.
    withServer(async (s) => {
      const out = await runNode(
        `const { Relock } = require(${DIST});
         const Redis = require(${IOREDIS}).default;
         const r = new Redis(${s.port});
         const locks = new Relock(r);
         (async () => {
           await locks.acquireOrThrow("t", { ttl: 1, wait: 0 }).then(() => console.log("wait0: held"), (e) => console.log("wait0:", e.name, e.retryable));
           await locks.acquire("t", { ttl: 1 }).then(() => console.log("returned"), (e) => console.log("threw", e.name));
           r.disconnect();
         })();`,
        5000,
      );
      assert.match(out.out, /wait0: InvalidArgumentError false/);
      assert.equal(out.alive, false, `acquire({ ttl: 1 }) never returned: ${out.out}`);
    }),
);

test(
  "attack: a ttl over 2^31 * 3 ms (about 75 days) and a wait over 2^31 ms",
  () =>
    // Documented range: ttl up to 10^12 ms. Must hold: a hold is renewed about every ttl/3
    // (not in a loop), and a long wait queues once (LOCK.WAIT), first in first out.
    withServer(async (s) => {
      const r = connect(s);
      const locks = relock(r);
      const renewals = async () => Number(/cmdstat_lock\.renew:calls=(\d+)/i.exec(await r.call("INFO", "commandstats"))?.[1] ?? 0);
      const h = await locks.acquire("huge", { ttl: 2 ** 31 * 3 + 3000 });
      const before = await renewals();
      await sleep(300);
      const storm = (await renewals()) - before;
      await h.release();
      const holder = await locks.acquire("w", { ttl: 10_000 });
      const waiting = locks.acquire("w", { wait: 2 ** 31 + 10 });
      await sleep(500);
      const queued = (await locks.waiters("w")).length;
      await holder.release();
      await (await waiting)?.release();
      assert.ok(storm <= 1, `${storm} renewals in 300 ms of a 75-day ttl`);
      assert.equal(queued, 1, "the long wait is not queued");
      await locks.close();
    }),
);

test("attack: ttl and wait out of range are usage errors found before any server is asked", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = relock(r);
    for (const ttl of [0, -1, 0.5, NaN, Infinity, 1e12 + 1]) {
      await assert.rejects(locks.acquire("k", { ttl, wait: 0 }), (e) => e instanceof InvalidArgumentError && !e.retryable, String(ttl));
    }
    for (const wait of [-1, NaN, "5"]) {
      await assert.rejects(locks.acquire("k", { ttl: 1000, wait }), InvalidArgumentError, String(wait));
    }
    assert.equal(await r.call("LOCK.INFO", "k"), null);
    await locks.close();
  }));

test("attack: a 1 MB key and a 10 kB owner prefix", () =>
  withServer(async (s) => {
    const locks = relock(connect(s), { ownerPrefix: "p".repeat(10_000) });
    const key = "k".repeat(1_000_000);
    await locks.using(key, { ttl: 60_000, wait: 0 }, async (h) => {
      await h.renew();
      assert.ok(Buffer.byteLength(h.owner) <= 256);
      assert.equal((await locks.info(key)).owner, h.owner);
    });
    assert.equal(await locks.info(key), null);
    await locks.close();
  }));

// --- process exit --------------------------------------------------------------------------

test(
  "attack: a process that waited for a lock exits once its own client quits",
  () =>
    // Renewal timers are unref'd and the docs say a process keeps nothing past its lease. Must
    // hold: after `using` (which had to wait) and `redis.quit()`, the process ends.
    withServer(async (s) => {
      const locks = relock(connect(s));
      const holder = await locks.acquire("contended", { ttl: 5000 });
      const child = runNode(
        `const { Relock } = require(${DIST});
         const Redis = require(${IOREDIS}).default;
         const r = new Redis(${s.port});
         new Relock(r).using("contended", { ttl: 5000, wait: 5000 }, () => console.log("got"))
           .then(() => r.quit()).then(() => console.log("quit"));`,
        8000,
      );
      await eventually(async () => (await locks.waiters("contended")).length === 1, 5000);
      await holder.release();
      const out = await child;
      assert.match(out.out, /got/);
      assert.equal(out.alive, false, `still running 5 s after it quit its client: ${out.out}`);
      await locks.close();
    }),
);

test("attack: a process dying of an uncaught exception keeps its lock no longer than the ttl", () =>
  withServer(async (s) => {
    const locks = relock(connect(s));
    const out = await runNode(
      `const { Relock } = require(${DIST});
       const Redis = require(${IOREDIS}).default;
       new Relock(new Redis(${s.port})).acquire("boom", { ttl: 1000 }).then(() => { console.log("held"); throw new Error("boom"); });`,
      20_000,
    );
    assert.match(out.out, /held/);
    assert.notEqual(out.code, 0);
    const died = performance.now();
    assert.ok(await eventually(async () => (await locks.info("boom")) === null, 5000));
    assert.ok(performance.now() - died < 2000);
    await locks.close();
  }));

// --- Redlock -------------------------------------------------------------------------------

test(
  "attack: a Redlock hold taken with a wait, then one of its masters stops",
  () =>
    // Docs: "a paused Redlock master (the others carry it, round after round)". Must hold: a
    // hold taken with `wait` over 3 healthy masters survives one of them stopping.
    withServers(3, async (servers) => {
      const clients = servers.map((s) => connect(s));
      const locks = relock(clients);
      assert.ok(await eventually(async () => clients.every((c) => c.status === "ready")));
      const holds = [];
      for (let i = 0; i < 20; i++) holds.push(await locks.acquire(`w${i}`, { ttl: 1200, wait: 2000 }));
      await sleep(100);
      let h = null;
      let where = null;
      for (const x of holds) {
        const w = await held(servers, x.key);
        if (!h && w.filter(Boolean).length < 3) [h, where] = [x, w];
        else await x.release();
      }
      if (!h) return; // every hold is on all three masters: one stopping cannot end any
      const stop = servers[where.indexOf(true)];
      stop.pause();
      try {
        const lost = await Promise.race([new Promise((r) => h.signal.addEventListener("abort", () => r(true))), sleep(2000).then(() => false)]);
        assert.equal(lost, false, `one paused master ended the hold (kept by ${JSON.stringify(where)}): ${h.reason}`);
      } finally {
        stop.resume();
      }
      await locks.close();
    }),
);

test(
  "attack: Redlock fencing: a hold granted after another must carry a larger hold.token",
  () =>
    // The docs fence with `hold.token` ("store.write(data, { fence: hold.token })"). Over masters
    // 0, 1, 2: A holds masters 1 and 2; C queues on 1 and 2; B (the package) asks all three:
    // master 0 grants B at once (its token is minted now), B queues on 1 and 2 behind C. A
    // releases: C holds 1 and 2 (a quorum) with newer tokens, works, releases; then B gets 1 and
    // 2 within its partial hold and is the next holder. Must hold: B's hold.token is larger
    // than every token C fenced with (else a store that saw C refuses B, and a late write of C
    // passes after B's).
    withServers(3, async (servers) => {
      const raw = (i) => connect(servers[i]);
      const clients = servers.map((s) => connect(s));
      const locks = relock(clients, { maxPartialHold: 2000 });
      assert.ok(await eventually(async () => clients.every((c) => c.status === "ready")));
      for (const i of [1, 2]) assert.ok(await raw(i).call("LOCK.ACQUIRE", "f", "A", 10_000));
      const c = [1, 2].map((i) => raw(i).call("LOCK.WAIT", "f", "C", 10_000, 10_000));
      const waiters = async (n) => (await Promise.all([1, 2].map((i) => raw(i).call("LOCK.WAITERS", "f")))).every((w) => w.length === n);
      assert.ok(await eventually(() => waiters(1), 5000));
      const b = locks.acquire("f", { ttl: 10_000, wait: 8000 });
      assert.ok(await eventually(() => waiters(2), 5000));
      for (const i of [1, 2]) await raw(i).call("LOCK.RELEASE", "f", "A");
      const cTokens = (await Promise.all(c)).map(Number);
      // C releases master 2 first: B's next grant is then minted where C's newest token was.
      // (Released on master 1 first, B could win on 0 and 1 within the millisecond C was
      // granted on 2, and tokens of separate masters minted in one millisecond are equal:
      // the wall-clock floor orders tokens across masters only from one millisecond to the
      // next, which no client can change.)
      for (const i of [2, 1]) await raw(i).call("LOCK.RELEASE", "f", "C");
      const hold = await b;
      assert.ok(hold, "B was not granted");
      const bTokens = JSON.stringify(hold.tokens);
      await hold.release();
      await locks.close();
      assert.ok(hold.token > Math.max(...cTokens), `B's hold.token ${hold.token} is older than C's tokens ${cTokens} (B's tokens ${bTokens})`);
    }),
);

test("attack: tasks sharing one client never overlap, on one server and over 3 masters", () =>
  withServers(3, async (servers) => {
    for (const locks of [relock(connect(servers[0])), relock(servers.map((s) => connect(s)))]) {
      let inside = 0;
      let overlaps = 0;
      const tokens = [];
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          for (let i = 0; i < 5; i++) {
            await locks.using("m", { ttl: 2000, wait: 20_000 }, async (h) => {
              inside += 1;
              if (inside > 1) overlaps += 1;
              tokens.push(Math.max(...Object.values(h.tokens))); // hold.token is another test's business
              await sleep(1);
              h.check();
              inside -= 1;
            });
          }
        }),
      );
      assert.equal(overlaps, 0);
      assert.equal(tokens.length, 80);
      assert.deepEqual([...tokens].sort((a, b) => a - b), tokens);
      await locks.close();
    }
  }));

// --- errors --------------------------------------------------------------------------------

test(
  "attack: renew(ttl) with a ttl over relock.restart-grace-ms",
  () =>
    // Docs: such a ttl is "a ServerError that is not retryable". Must hold: that error, and
    // the hold stays held.
    withServer(
      async (s) => {
        const locks = relock(connect(s));
        let h = null;
        assert.ok(await eventually(async () => (h = await locks.acquire("g", { ttl: 900, wait: 0 })) !== null, 10_000, 50));
        await assert.rejects(h.renew(5000), (e) => e instanceof ServerError && !e.retryable);
        assert.equal(h.lost, false);
        assert.equal((await locks.info("g"))?.owner, h.owner);
        await locks.close();
      },
      ["--relock.restart-grace-ms", "1000"],
    ),
);

test(
  "attack: a release the server refuses (ACL without LOCK.RELEASE)",
  () =>
    withServer(async (s) => {
      await connect(s).call("ACL", "SETUSER", "norelease", "on", ">pw", "~*", "+@all", "-lock.release");
      const locks = relock(connect(s, 3, { username: "norelease", password: "pw" }));
      const h = await locks.acquire("r", { ttl: 5000 });
      const result = await h.release().catch((e) => e);
      assert.deepEqual(await held([s], "r"), [true]);
      assert.ok(result instanceof ServerError, `release() gave ${result} with the lock still held`);
    }),
);

test("attack: a user without LOCK.RENEW loses the hold at its first renewal, with NOPERM and the server named", () =>
  withServer(async (s) => {
    await connect(s).call("ACL", "SETUSER", "norenew", "on", ">pw", "~*", "+@all", "-lock.renew");
    const locks = relock(connect(s, 2, { username: "norenew", password: "pw" }));
    const h = await locks.acquire("n", { ttl: 900 });
    await new Promise((r) => h.signal.addEventListener("abort", r, { once: true }));
    assert.ok(performance.now() <= h.validUntil + 50);
    assert.ok(h.signal.reason instanceof LockLostError && !h.signal.reason.retryable);
    assert.match(h.reason, /NOPERM/);
    assert.ok(h.reason.includes(locks.servers[0]));
    await locks.close();
  }));

test("attack: a server without the module, for every wait", async () => {
  const s = await Server.start([], { module: false });
  try {
    const locks = relock(connect(s));
    for (const wait of [0, undefined, 1000]) {
      await assert.rejects(
        locks.acquireOrThrow("k", { wait }),
        (e) => e instanceof ServerError && !e.retryable && e.servers[0] === locks.servers[0] && /module loaded/.test(e.message),
        String(wait),
      );
    }
    await assert.rejects(locks.info("k"), (e) => e instanceof ServerError && !e.retryable);
    await locks.close();
  } finally {
    closeClients();
    s.close();
  }
});

// --- restarts and unhandled rejections -----------------------------------------------------

test("attack: a server restart ends the hold within validity, with no unhandled rejection", () =>
  withServer(async (s) => {
    const unhandled = [];
    const onUnhandled = (e) => unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    try {
      const locks = relock(connect(s));
      const h = await locks.acquire("k", { ttl: 1500 });
      await restart(s);
      await new Promise((r) => h.signal.addEventListener("abort", r, { once: true }));
      assert.ok(performance.now() <= h.validUntil + 50);
      assert.match(h.reason, /LOCK\.RENEW answered nil|validity ran out/);
      await h.release();
      await locks.close();
      await sleep(200);
      assert.deepEqual(unhandled, []);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  }));
