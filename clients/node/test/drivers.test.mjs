// Issue 29, second attack on the Node package: the client's own state (closed, subscribed,
// prefixed), close() under calls in flight, lost replies of every step, hostile values. Each
// test stages the break and says what must hold; waits are bounded by events, not sleeps.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, test } from "node:test";

import { closeAll, connectPort as connect, proxy, relock, waitOutTtl, withServer, deadline } from "./helpers.mjs";
import { eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock, RelockError, InvalidArgumentError } = require("../dist/index.js");
const Redis = require("ioredis").default;

after(closeAll);

const ready = (r) => (r.status === "ready" ? Promise.resolve() : new Promise((res) => r.once("ready", res)));
const ended = (r) => (r.status === "end" ? Promise.resolve() : new Promise((res) => r.once("end", res)));
const info = async (r, key) => {
  const m = new Relock(r);
  return m.info(key);
};
const renewals = async (r) => Number(/relock_renewed_total:(\d+)/.exec(String(await r.call("INFO", "relock")))[1]);
const waiters = async (r, key) => Number((await info(r, key))?.waiters ?? 0);

test("a client that was closed is a clear error at once, and never grants a lock nobody can renew or release", () =>
  // The application quit (or disconnected) the client it gave Relock. Must hold: every
  // acquisition, with or without a wait, rejects at once with a permanent error naming it,
  // and the key is never taken (a wait would otherwise go on on a connection of its own and
  // grant a lock that no renewal or release can reach: held by nobody until its ttl).
  withServer(async (s) => {
    const direct = connect(s.port);
    for (const end of ["quit", "disconnect"]) {
      const c = connect(s.port);
      await ready(c);
      const gone = ended(c);
      if (end === "quit") await c.quit();
      else c.disconnect();
      await gone;
      const locks = relock(c);
      for (const wait of [undefined, 2000, 0]) {
        const key = `k-${end}-${wait}`;
        const outcome = await deadline(
          locks.acquireOrThrow(key, { ttl: 5000, wait }).then(
            (h) => h,
            (e) => e,
          ),
          5000,
          "still waiting",
        );
        assert.ok(outcome instanceof RelockError, `${end}, wait ${wait}: ${outcome}`);
        assert.equal(outcome.retryable, false, `${end}, wait ${wait}: ${outcome.message}`);
        assert.match(outcome.message, /client given to Relock was closed/);
        assert.equal(await info(direct, key), null, `${end}, wait ${wait}: a lock was granted through a closed client`);
      }
    }
  }));

test("close() during a wait cuts it: the acquisition rejects and nothing is granted after close()", () =>
  // A task waits without limit while the application closes the Relock (shutting down).
  // Must hold: close() cuts the wait, the acquisition rejects (not retryable), and when the
  // holder lets go the key is not handed to the closed client's waiter (held by nobody).
  withServer(async (s) => {
    const direct = connect(s.port);
    const holder = relock(direct);
    const h = await holder.acquireOrThrow("k", { ttl: 10_000 });
    const g = await holder.acquireAllOrThrow(["a", "b"], { ttl: 10_000 });
    const locks = relock(connect(s.port));
    const one = locks.acquireOrThrow("k", { ttl: 10_000 }).then(
      (x) => x,
      (e) => e,
    );
    const group = locks.acquireAllOrThrow(["a", "b"], { ttl: 10_000 }).then(
      (x) => x,
      (e) => e,
    );
    assert.ok(await eventually(async () => (await waiters(direct, "k")) === 1 && (await waiters(direct, "a")) === 1, 10_000));
    await locks.close();
    await h.release();
    await g.release();
    for (const [what, p] of [["one key", one], ["a group", group]]) {
      const outcome = await deadline(p, 5000, "still waiting");
      assert.ok(outcome instanceof RelockError, `${what}: ${outcome}`);
      assert.equal(outcome.retryable, false);
      assert.match(outcome.message, /closed/);
    }
    for (const key of ["k", "a", "b"]) {
      assert.ok(await eventually(async () => (await info(direct, key)) === null, 5000), `${key} is held after close() by a waiter it should have cut`);
    }
  }));

test("a Relock made per request shares the package's connections: they never pile up", () =>
  // An application makes `new Relock(redis)` in each request handler, on one client. Must
  // hold: the package's connections are the client's, shared by every Relock on it (one
  // shared connection, the waits' own), not one more per Relock until the server refuses
  // clients (maxclients) and every holder's renewals fail.
  withServer(async (s) => {
    const r = connect(s.port);
    const holder = relock(connect(s.port));
    const h = await holder.acquireOrThrow("busy", { ttl: 10_000 });
    for (let i = 0; i < 200; i++) {
      const locks = new Relock(r);
      await locks.using(`k${i % 7}`, { ttl: 5000, wait: 1000 }, async () => undefined);
      if (i % 50 === 0) assert.equal(await locks.acquire("busy", { wait: 20 }), null); // a wait, on a connection of its own
    }
    const clients = Number(/connected_clients:(\d+)/.exec(String(await r.call("INFO", "clients")))[1]);
    // r, the holder's client and its shared connection, the Relocks' shared connection, an idle wait connection.
    assert.ok(clients <= 6, `${clients} connections after 200 Relocks on one client`);
    assert.ok(r.listenerCount("end") <= 2, `${r.listenerCount("end")} 'end' listeners on the client`);
    await h.release();
  }));

test("hostile options are usage errors at once, never a wait that hammers the servers", () =>
  // retryDelay NaN or negative would make every pause between rounds 0 ms (a Redlock wait or
  // a group wait in a tight loop); an ownerPrefix that is not a string failed deep in Buffer.
  withServer(async (s) => {
    const r = connect(s.port);
    for (const options of [{ retryDelay: NaN }, { retryDelay: -1 }, { maxPartialHold: NaN }, { maxPartialHold: -5 }, { nodeTimeout: NaN }, { nodeTimeout: "100" }, { retryDelay: "200" }, { ownerPrefix: {} }]) {
      assert.throws(() => new Relock(r, options), InvalidArgumentError, JSON.stringify(options));
    }
    const locks = relock(r, { retryDelay: 0, maxPartialHold: 0 });
    await locks.using("k", { wait: 0 }, async (h) => assert.ok(h.token > 0));
  }));

test("the client's keyPrefix, subscriber mode or lazyConnect never change which key is locked", () =>
  // ioredis prefixes only the keys of commands it knows (LOCK.* are not): two applications
  // with different prefixes lock the same key, as every other relock client does (docs/node.md).
  // A client in subscriber mode, or one never connected (lazyConnect), still serves its locks.
  withServer(async (s) => {
    const direct = connect(s.port);
    const a = relock(connect(s.port, { keyPrefix: "a:" }));
    const b = relock(connect(s.port, { keyPrefix: "b:" }));
    const sub = connect(s.port);
    await sub.subscribe("news");
    const subs = relock(sub);
    const lazy = relock(connect(s.port, { lazyConnect: true }));
    const h = await a.acquireOrThrow("job", { ttl: 5000, wait: 0 });
    assert.equal((await info(direct, "job"))?.owner, h.owner);
    assert.equal(await info(direct, "a:job"), null);
    assert.equal(await b.acquire("job", { wait: 0 }), null);
    assert.equal(await subs.acquire("job", { wait: 0 }), null);
    assert.equal(await lazy.acquire("job", { wait: 0 }), null);
    const waiting = subs.acquireOrThrow("job", { ttl: 5000, wait: 5000 });
    await h.release();
    const h2 = await waiting;
    assert.equal((await info(direct, "job"))?.owner, h2.owner);
    await h2.release();
  }));

test("a background renewal queued behind renew(ttl) renews with the new ttl, never the old one", () =>
  // renew(60000) is under way (the server stalls) when the background renewal's timer fires:
  // it queues behind. Must hold: it renews with the ttl the hold has when it runs (60000), not
  // the one it had when its timer fired (900), so the server keeps the lease renew() asked for.
  // (relock.test's "renewal keeps a hold past its ttl" failed so under load.)
  withServer(async (s) => {
    const direct = connect(s.port);
    const locks = relock(connect(s.port), { nodeTimeout: 2000 });
    const h = await locks.acquireOrThrow("k", { ttl: 900 });
    const before = await renewals(direct);
    s.pause();
    let renewed;
    try {
      renewed = h.renew(60_000);
      await waitOutTtl(450); // the background renewal's timer (every 300 ms) fires meanwhile
    } finally {
      s.resume();
    }
    await renewed;
    assert.equal(h.ttl, 60_000);
    // renew(60000), then the background renewal that queued behind it.
    assert.ok(await eventually(async () => (await renewals(direct)) >= before + 2, 5000));
    const ttl = (await info(direct, "k"))?.ttl;
    assert.ok(ttl > 50_000, `the server's ttl is ${ttl} after renew(60000)`);
    await h.release();
  }));

test("a process that quits its client while holding releases the hold, telling the holder first", () =>
  // With ioredis a process ends by quitting (or disconnecting) its client; the package's
  // connections go with it. Must hold: the holds made on that client are ended (signal
  // aborted, lost) and released before the connections close, so the key is free when the
  // process exits, not held by nobody for the rest of its ttl.
  withServer(async (s) => {
    const direct = connect(s.port);
    const c = connect(s.port);
    const locks = relock(c);
    const h = await locks.acquireOrThrow("k", { ttl: 30_000 });
    let signalled = false;
    h.signal.addEventListener("abort", () => (signalled = true));
    await c.quit();
    assert.ok(await eventually(async () => (await info(direct, "k")) === null, 5000), "the hold outlived its client's quit()");
    assert.equal(signalled, true, "released without its holder being told");
    assert.equal(h.lost, true);
    assert.match(h.reason, /closed/);
    // A whole process: acquires, quits its client, exits.
    const dist = require.resolve("../dist/index.js");
    const ioredis = require.resolve("ioredis");
    const code = `const { Relock } = require(${JSON.stringify(dist)}); const Redis = require(${JSON.stringify(ioredis)}).default;
      const r = new Redis({ port: ${s.port}, host: "127.0.0.1" });
      (async () => { await new Relock(r).acquireOrThrow("p", { ttl: 30000 }); await r.quit(); })();`;
    const { spawnSync } = await import("node:child_process");
    const run = spawnSync(process.execPath, ["-e", code], { encoding: "utf8", timeout: 20_000 });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(await info(direct, "p"), null, "a process that quit its client and exited left its lock held");
  }));
