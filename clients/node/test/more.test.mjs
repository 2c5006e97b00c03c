// What the module added after the first packages: loss reasons with who, the journal and
// statistics, permits, downgrade, several keys at once, the restart grace. Against real
// servers, RESP2 and RESP3; waits are bounded by events, not sleeps.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, test } from "node:test";

import { Server, eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock, GroupHold, NotAcquiredError, LockLostError, ServerError, OtherPermitsError, InvalidArgumentError } = require("../dist/index.js");
const core = require("../dist/core.js");
const Redis = require("ioredis").default;

const opened = [];
function connect(server, protocol = 3, extra = {}) {
  const r = new Redis({ port: server.port, host: "127.0.0.1", protocol, maxRetriesPerRequest: 2, ...extra });
  opened.push(r);
  return r;
}
after(() => opened.forEach((r) => r.disconnect()));

async function withServer(fn, args) {
  const s = await Server.start(args);
  try {
    return await fn(s);
  } finally {
    for (const r of opened.splice(0)) r.disconnect();
    s.close();
  }
}

const lost = (hold) => new Promise((res) => (hold.signal.aborted ? res() : hold.signal.addEventListener("abort", res, { once: true })));

for (const protocol of [3, 2]) {
  test(`a loss names who broke it (RESP${protocol})`, () =>
    withServer(async (s) => {
      const ops = connect(s, protocol);
      await ops.client("SETNAME", "ops");
      const opsId = await ops.client("ID");
      const locks = new Relock(connect(s, protocol));
      await locks.using("job", { ttl: 2000 }, async (hold) => {
        assert.equal(await ops.call("LOCK.FORCERELEASE", "job"), 1);
        await lost(hold);
        assert.equal(hold.lossCause, "forcereleased");
        assert.equal(hold.who.client, opsId);
        assert.equal(hold.who.name, "ops");
        assert.equal(hold.who.user, "default");
        assert.match(hold.reason, new RegExp(`by client ${opsId} \\(name ops, user default`));
        const e = hold.signal.reason;
        assert.ok(e instanceof LockLostError);
        assert.equal(e.lossCause, "forcereleased");
        assert.equal(e.who.client, opsId);
        assert.equal(e.loss, hold.loss);
      });
      await locks.close();
    }));

  test(`delete, flush and an empty journal (RESP${protocol})`, () =>
    withServer(async (s) => {
      const r = connect(s, protocol);
      const locks = new Relock(r);
      await locks.using("a", { ttl: 2000 }, async (h) => {
        await r.del("a");
        await lost(h);
        assert.equal(h.lossCause, "deleted", h.reason);
      });
      await locks.using("b", { ttl: 2000 }, async (h) => {
        await r.flushall();
        await lost(h);
        assert.equal(h.lossCause, "flushed", h.reason);
        assert.equal(h.loss.entry.key, "");
      });
      await r.config("SET", "relock.log-max-len", "0");
      await locks.using("c", { ttl: 2000 }, async (h) => {
        await r.call("LOCK.FORCERELEASE", "c");
        await lost(h);
        assert.equal(h.lossCause, undefined);
        assert.equal(h.who, undefined);
        assert.match(h.reason, /cannot say why/);
      });
      await locks.close();
    }));

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

  test(`a group: one token, renewed together, all or nothing (RESP${protocol})`, () =>
    withServer(async (s) => {
      const r = connect(s, protocol);
      const locks = new Relock(r);
      await locks.usingAll(["acct:1", "acct:2", "acct:3"], { ttl: 600 }, async (g) => {
        assert.ok(g instanceof GroupHold);
        assert.deepEqual(Object.keys(g.keyTokens), ["acct:1", "acct:2", "acct:3"]);
        assert.equal(new Set(Object.values(g.keyTokens)).size, 1);
        assert.equal(await locks.acquire("acct:2", { wait: 0 }), null);
        assert.equal(await locks.acquireAll(["acct:3", "other"], { wait: 0 }), null);
        assert.equal(await r.exists("other"), 0);
        const end = performance.now() + 1500;
        while (performance.now() < end) {
          g.check(); // renewed as a group past its ttl
          await new Promise((res) => setTimeout(res, 50));
        }
        for (const k of g.keys) assert.equal((await locks.info(k)).owner, g.owner);
      });
      assert.equal(await r.exists("acct:1", "acct:2", "acct:3"), 0);
      await locks.close();
    }));
}

test("a group waits, and is lost with the key that went", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    const one = await locks.acquire("b", { ttl: 5000 });
    const pending = locks.acquireAll(["a", "b", "c"], { ttl: 2000, wait: 10_000 });
    assert.ok(await eventually(async () => (await locks.waiters("b")).length === 1));
    await one.release();
    const g = await pending;
    assert.ok(g && g.keyTokens.b > one.token);
    await r.del("c");
    await lost(g);
    assert.equal(g.lossCause, "deleted");
    assert.match(g.reason, /key "c"/);
    assert.equal(await g.release(), false);
    assert.ok(await eventually(async () => (await r.exists("a", "b")) === 0));
    await locks.close();
  }));

test("a group not had in time gives back what it took", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    const blocker = await locks.acquire("k2", { ttl: 10_000 });
    assert.equal(await locks.acquireAll(["k1", "k2"], { wait: 300 }), null);
    assert.ok(await eventually(async () => (await r.exists("k1")) === 0));
    await assert.rejects(locks.usingAll(["k1", "k2"], { wait: 0 }, () => {}), NotAcquiredError);
    await blocker.release();
    await locks.close();
  }));

test("groups taken in opposite orders never deadlock", () =>
  withServer(async (s) => {
    const locks = new Relock(connect(s));
    const keys = ["res:0", "res:1", "res:2", "res:3", "res:4", "res:5"];
    let inside = 0;
    const worker = async (order) => {
      let n = 0;
      for (let i = 0; i < 40; i++) {
        await locks.usingAll(order.slice(0, 4 + (i % 3)), { ttl: 5000, wait: 30_000 }, async () => {
          inside += 1;
          assert.equal(inside, 1, "two groups inside at once");
          await new Promise((res) => setImmediate(res));
          inside -= 1;
          n += 1;
        });
      }
      return n;
    };
    assert.deepEqual(await Promise.all([worker(keys), worker([...keys].reverse()), worker(keys)]), [40, 40, 40]);
    await locks.close();
  }));

test("group limits: 256 keys, duplicates, wrong types, huge owners", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    const keys = Array.from({ length: 256 }, (_, i) => `k${i}`);
    await locks.usingAll(keys, { ttl: 5000 }, async (g) => {
      assert.equal(Object.keys(g.keyTokens).length, 256);
      await g.renew();
    });
    assert.equal(await r.dbsize(), 0);
    await assert.rejects(locks.acquireAll([...keys, "k256"]), InvalidArgumentError);
    await assert.rejects(locks.acquireAll(["a", "a"]), InvalidArgumentError);
    await assert.rejects(locks.acquireAll([]), InvalidArgumentError);
    await assert.rejects(locks.acquireAll("ab"), InvalidArgumentError);
    await r.set("str", "v");
    await assert.rejects(locks.acquireAll(["x", "str"]), (e) => e instanceof ServerError && !e.retryable && /WRONGTYPE/.test(e.message));
    const wide = new Relock(r, { ownerPrefix: "é".repeat(300) });
    await wide.usingAll(["a", "b"], {}, async (g) => assert.ok(Buffer.byteLength(g.owner) <= 256));
    await locks.close();
  }));

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

test("loss parsing of bad and huge entries; wait order and slots", () => {
  const owner = "h/1/" + "f".repeat(32);
  const huge = "x".repeat(100_000);
  const entries = core.parseLog("s", [
    ["id", 3, "time", 2000, "db", 0, "key", "k", "owner", "other", "token", 9, "reason", "expired", "held", "", "client-info", "", "waiters", 0],
    new Map(Object.entries({ id: 2, time: 1500, key: "k", owner, reason: "forcereleased", held: 10, "client-info": `id=17 addr=1.2.3.4:5 name=${huge} user=admin` })),
  ]);
  const loss = core.lossReason(entries, owner, 0, 3000);
  assert.equal(loss.cause, "forcereleased");
  assert.equal(loss.who.client, 17);
  assert.equal(loss.who.name, huge);
  assert.match(loss.message, /1\.5 s ago/);
  assert.equal(core.lossReason(entries, "nobody", 0).cause, null);
  assert.equal(core.parseWho(""), null);
  assert.deepEqual(core.waitOrder(["b", "é", "a", "z"]), ["a", "b", "z", "é"]);
  assert.deepEqual(core.waitOrder(["\u{1F600}", "\uFFFF"]), ["\uFFFF", "\u{1F600}"]); // UTF-8 bytes, not UTF-16 units
  assert.equal(core.keySlot("foo"), 12182);
  assert.equal(core.keySlot("{user1000}.following"), core.keySlot("user1000"));
  // CLUSTER KEYSLOT on Redis 7.0.15: an empty first tag hashes the whole key (cluster-key-slot
  // 1.1.1 alone says 4015 and 0 for the first two), nested and later braces as Redis does.
  for (const [key, slot] of [["foo{}{bar}", 8363], ["{}}", 14790], ["{}", 15257], ["foo{{bar}}zap", 4015], ["foo{bar}{zap}", 5061], ["{a}}", 15495], ["123456789", 12739]]) {
    assert.equal(core.keySlot(key), slot, key);
  }
  assert.throws(() => core.groupTokens(["a", "b"], [1]), /answered 1 for 2 keys/);
});

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

test("Redlock counts a master in grace as a no-vote", async () => {
  const plain = [await Server.start(), await Server.start()];
  const grace = await Server.start(["--relock.restart-grace-ms", "60000"]);
  try {
    const clients = [connect(plain[0]), connect(plain[1]), connect(grace)];
    // Every connection up first (by event), so that the `wait: 0` calls below count votes
    // and not connections still opening on a loaded machine: the clients' own, then the
    // package's (a warm-up acquisition waits until both plain masters answered it).
    await Promise.all(clients.map((c) => (c.status === "ready" ? undefined : new Promise((res) => c.once("ready", res)))));
    const locks = new Relock(clients, { nodeTimeout: 1000 });
    const warm = await locks.acquire("warm", { ttl: 5000, wait: 20_000 });
    assert.ok(warm);
    await warm.release();
    await locks.using("k", { ttl: 5000, wait: 0 }, async (h) => assert.equal(Object.keys(h.tokens).length, 2));
    await locks.usingAll(["a", "b"], { ttl: 5000, wait: 0 }, async (g) => assert.ok(g.token > 0));
    plain[0].pause();
    try {
      assert.equal(await locks.acquire("z", { ttl: 5000, wait: 0 }), null); // no quorum, no error
    } finally {
      plain[0].resume();
    }
    await locks.close();
  } finally {
    for (const r of opened.splice(0)) r.disconnect();
    [...plain, grace].forEach((x) => x.close());
  }
});

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

test("a vanished server ends a group within its validity", () =>
  withServer(async (s) => {
    const locks = new Relock(connect(s, 3, { maxRetriesPerRequest: 0, enableOfflineQueue: false }));
    const g = await locks.acquireAll(["a", "b"], { ttl: 900 });
    s.kill();
    await lost(g);
    assert.ok(performance.now() < g.validUntil);
    assert.equal(g.lossCause, undefined);
    assert.match(g.reason, /validity ran out/);
    assert.equal(await g.release(), false);
  }));

test("an old flush is not blamed, a new one is", () =>
  withServer(async (s) => {
    const r = connect(s);
    await r.config("SET", "relock.log-reasons", "flushed");
    await r.flushall();
    const locks = new Relock(r);
    const h = await locks.acquire("k", { ttl: 2000 });
    Object.defineProperty(h, "since", { value: Date.now() + 2000 }); // granted long after the flush
    await r.call("LOCK.FORCERELEASE", "k");
    await lost(h);
    assert.equal(h.lossCause, undefined);
    assert.match(h.reason, /cannot say why/);
    const h2 = await locks.acquire("k", { ttl: 2000 });
    await r.flushall();
    await lost(h2);
    assert.equal(h2.lossCause, "flushed");
    await locks.close();
  }));
