// The commands against real servers, RESP2 and RESP3: acquire and release, owners, shared
// holds, semaphores and permits, downgrade, what the server says (history, log, stats), the
// restart grace, hostile ttls and sizes, errors and refusals.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, test } from "node:test";
import process from "node:process";

import { connect, relock, closeAll, withServer, lost, held, DIST, IOREDIS, runNode, restart, waitOutTtl } from "./helpers.mjs";
import { Server, eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock, NotAcquiredError, LockLostError, ServerError, OtherLimitError, OtherPermitsError, InvalidArgumentError } = require("../dist/index.js");
const core = require("../dist/core.js");
const Redis = require("ioredis").default;

after(closeAll);

for (const protocol of [3, 2]) {
  // From relock.test.mjs (the behaviour cases of relock-client).
  test(`acquire, owner and release (RESP${protocol})`, () =>
    withServer(async (s) => {
      const r = connect(s, protocol);
      const locks = new Relock(r);
      let seen;
      const out = await locks.using("orders:1", async (hold) => {
        seen = hold;
        assert.ok(hold.token > 0);
        const info = await locks.info("orders:1");
        assert.equal(info.owner, hold.owner);
        assert.equal(info.token, hold.token);
        const [host, pid, rand] = hold.owner.split("/");
        assert.ok(host);
        assert.equal(pid, String(process.pid));
        assert.equal(rand.length, 32);
        assert.equal(hold.lost, false);
        hold.check();
        return 42;
      });
      assert.equal(out, 42);
      assert.equal(await locks.info("orders:1"), null);
      assert.equal(await seen.release(), false);
      await locks.close();
    }));

  // From relock.test.mjs (the behaviour cases of relock-client).
  test(`shared holds and a writer (RESP${protocol})`, () =>
    withServer(async (s) => {
      const locks = new Relock(connect(s, protocol));
      const a = await locks.acquire("cat", { shared: true });
      const b = await locks.acquire("cat", { shared: true });
      const info = await locks.info("cat");
      assert.equal(info.mode, "shared");
      assert.equal(info.holders, 2);
      assert.deepEqual((await locks.holders("cat")).map((h) => h.owner), [a.owner, b.owner]);
      assert.equal(await locks.acquire("cat", { wait: 0 }), null);
      await a.release();
      await b.release();
      const w = await locks.acquire("cat", { wait: 0 });
      assert.ok(w.token > b.token);
      await locks.close();
    }));

  // From more.test.mjs (what the module added after the first packages).
  test(`history, log and stats (RESP${protocol})`, () =>
    withServer(async (s) => {
      const r = connect(s, protocol);
      const locks = new Relock(r);
      await locks.resetLog();
      const h = await locks.acquire("hot", { ttl: 5000 });
      assert.equal(await locks.acquire("hot", { wait: 50 }), null);
      await locks.forceRelease("hot");
      await lost(h);
      const hist = await locks.history("hot");
      assert.deepEqual(hist.map((e) => e.reason), ["forcereleased"]);
      assert.equal(hist[0].owner, h.owner);
      assert.equal(hist[0].token, h.token);
      assert.equal(hist[0].who.command, "LOCK.FORCERELEASE");
      assert.ok(hist[0].held !== null && hist[0].time > 0);
      assert.deepEqual((await locks.log()).map((e) => e.key), ["hot"]);
      const [top] = await locks.stats();
      assert.equal(top.key, "hot");
      assert.ok(top.waits >= 1 && top.timeouts >= 1 && top.waitMsTotal >= 40);
      await locks.resetLog();
      assert.deepEqual(await locks.log(), []);
      await locks.close();
    }));

  // From more.test.mjs (what the module added after the first packages).
  test(`permits, waiters and downgrade (RESP${protocol})`, () =>
    withServer(async (s) => {
      const locks = new Relock(connect(s, protocol));
      const a = await locks.acquire("pool", { shared: true, limit: 5, permits: 3, wait: 0 });
      assert.ok(a);
      assert.equal(await locks.acquire("pool", { shared: true, limit: 5, permits: 3, wait: 0 }), null);
      const pending = locks.acquire("pool", { shared: true, limit: 5, permits: 4, wait: 10_000 });
      assert.ok(await eventually(async () => (await locks.waiters("pool")).length === 1));
      const [w] = await locks.waiters("pool");
      assert.deepEqual([w.mode, w.limit, w.permits], ["shared", 5, 4]);
      await a.release();
      const b = await pending;
      assert.ok(b);
      assert.equal((await locks.holders("pool"))[0].permits, 4);
      assert.equal((await locks.info("pool")).permitsFree, 1);
      await b.release();
      await assert.rejects(locks.acquire("pool", { shared: true, permits: 2 }), InvalidArgumentError);
      await assert.rejects(locks.acquire("pool", { shared: true, limit: 2, permits: 3 }), InvalidArgumentError);

      const writer = await locks.acquire("doc", { ttl: 5000 });
      const reader = locks.acquire("doc", { shared: true, wait: 10_000 });
      assert.ok(await eventually(async () => (await locks.waiters("doc")).length === 1));
      await writer.downgrade();
      const rd = await reader;
      assert.ok(rd);
      assert.equal(writer.shared, true);
      const info = await locks.info("doc");
      assert.equal(info.mode, "shared");
      assert.equal(info.holders, 2);
      await writer.downgrade(); // again: nothing changes
      assert.equal(await writer.reenter((n) => n), 2);
      await rd.release();
      await writer.release();

      const gone = await locks.acquire("doc2");
      await locks.forceRelease("doc2");
      await assert.rejects(gone.downgrade(), (e) => e instanceof LockLostError && e.lossCause === "forcereleased");
      await locks.close();
    }));
}

// From relock.test.mjs (the behaviour cases of relock-client).
test("owner prefixes", () =>
  withServer(async (s) => {
    const r = connect(s);
    await new Relock(r, { ownerPrefix: "billing" }).using("k", async (h) => assert.match(h.owner, /^billing\/[0-9a-f]{32}$/));
    await new Relock(r, { ownerPrefix: "" }).using("k", async (h) => assert.match(h.owner, /^[0-9a-f]{32}$/));
    assert.equal(Buffer.byteLength(new Relock(r, { ownerPrefix: "x".repeat(500) }).newOwner()), 256);
  }));

// From relock.test.mjs (the behaviour cases of relock-client).
test("semaphore, limits and errors", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    const p1 = await locks.acquire("enc", { limit: 2 });
    const p2 = await locks.acquire("enc", { limit: 2 });
    assert.equal(await locks.acquire("enc", { limit: 2, wait: 0 }), null);
    await assert.rejects(locks.acquire("enc", { limit: 3, wait: 0 }), (e) => e instanceof OtherLimitError && e.limit === 2 && !e.retryable && e.servers[0] === locks.servers[0]);
    const third = locks.using("enc", { limit: 2, wait: 10_000 }, async (p3) => assert.ok(p3.token > p2.token));
    assert.ok(await eventually(async () => (await locks.waiters("enc")).length === 1));
    await p1.release();
    await third;
    await p2.release();
    await assert.rejects(locks.acquire("k", { ttl: 0 }), InvalidArgumentError);
    await r.set("str", "x");
    await assert.rejects(locks.acquire("str"), (e) => e instanceof ServerError && !e.retryable && /WRONGTYPE/.test(e.message) && e.servers[0] === locks.servers[0]);
    await locks.using("re", async (h) => {
      await h.reenter(async (count) => {
        assert.equal(count, 2);
        assert.equal((await locks.info("re")).count, 2);
      });
      assert.equal((await locks.info("re")).count, 1);
    });
    assert.deepEqual(await locks.waiters("k"), []); // the module has LOCK.WAITERS: nobody waits
    await locks.close();
    const plain = await Server.start([], { module: false });
    try {
      const bare = new Relock(connect(plain));
      await assert.rejects(bare.acquire("k"), (e) => e instanceof ServerError && !e.retryable && /module loaded/.test(e.message) && e.servers[0] === `127.0.0.1:${plain.port}`);
    } finally {
      plain.close();
    }
  }));

// From more.test.mjs (what the module added after the first packages).
test("other permits is an error of its own", () =>
  withServer(async (s) => {
    const r = connect(s);
    await r.call("LOCK.ACQUIRE", "pool", "me", "10000", "SHARED", "LIMIT", "5", "PERMITS", "1");
    const err = await r.call("LOCK.REENTER", "pool", "me", "10000", "SHARED", "LIMIT", "5", "PERMITS", "2").catch((e) => e);
    const f = core.classify(err);
    assert.ok(f.otherPermits && f.permanent);
    const rnd = new core.Round(["s"], 0);
    rnd.onReply(0, null, f);
    assert.ok(rnd.permanentError("pool") instanceof OtherPermitsError);
  }));

// From more.test.mjs (what the module added after the first packages).
test("the restart grace grants nothing, then serves in order", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    assert.ok(Number(/grace_left_ms:(\d+)/.exec(await r.info("relock"))[1]) > 0);
    assert.equal(await locks.acquire("k", { ttl: 1000, wait: 0 }), null);
    await assert.rejects(locks.using("k", { ttl: 1000, wait: 0 }, () => {}), (e) => e instanceof NotAcquiredError && e.retryable && /restart grace/.test(e.message));
    assert.equal(await locks.acquireAll(["a", "b"], { ttl: 1000, wait: 0 }), null);
    await locks.using("k", { ttl: 1000, wait: 20_000 }, async (h) => assert.ok(h.token > 0));
    await locks.usingAll(["a", "b"], { ttl: 1000, wait: 20_000 }, async (g) => assert.ok(g.token > 0));
    await locks.close();
  }, ["--relock.restart-grace-ms", "1500"]));

// From more.test.mjs (what the module added after the first packages).
test("bad replies are read as nothing, and a bad group reply is permanent", () => {
  assert.deepEqual(core.parseLog("s", 42), []);
  assert.deepEqual(core.parseStats("s", "oops"), []);
  const [e] = core.parseLog("s", [7]);
  assert.equal(e.reason, "");
  assert.equal(e.who, null);
  const [f] = core.parseLog("s", [["time", "soon", "held", "long"]]);
  assert.equal(f.time, 0);
  assert.equal(f.held, 0);
  let bad;
  try {
    core.groupTokens(["a", "b"], "x");
  } catch (err) {
    bad = err;
  }
  assert.ok(core.classify(bad).permanent);
});

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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
        // 60 s: an endless loop never returns; a fresh process's start and two short calls
        // took over 5 s in a make test with a core busy (run K, 2026-12-04), which is not
        // what this test is about. The Python twin has the same bound.
        60_000,
      );
      assert.match(out.out, /wait0: InvalidArgumentError false/);
      assert.equal(out.alive, false, `acquire({ ttl: 1 }) never returned: ${out.out}`);
    }),
);

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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
      await waitOutTtl(300); // a renewal every ttl/3: none in this time
      const storm = (await renewals()) - before;
      await h.release();
      const holder = await locks.acquire("w", { ttl: 10_000 });
      const waiting = locks.acquire("w", { wait: 2 ** 31 + 10 });
      await waitOutTtl(500); // the wait's own timer (over 2^31 ms, which setTimeout would fire at once) runs
      const queued = (await locks.waiters("w")).length;
      await holder.release();
      await (await waiting)?.release();
      assert.ok(storm <= 1, `${storm} renewals in 300 ms of a 75-day ttl`);
      assert.equal(queued, 1, "the long wait is not queued");
      await locks.close();
    }),
);

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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
    closeAll();
    s.close();
  }
});
