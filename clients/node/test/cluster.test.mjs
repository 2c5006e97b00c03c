// A Redis Cluster (3 masters, 3 replicas): a failover under a held lock, groups, loss reasons
// and the journal.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";

import { closeAll, waitOutTtl, track } from "./helpers.mjs";
import { TestCluster, eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock } = require("../dist/index.js");
const Redis = require("ioredis").default;
const { Cluster } = require("ioredis");

after(closeAll);

// From relock.test.mjs (the behaviour cases of relock-client).
describe("cluster", () => {
  let cluster;
  before(async () => {
    cluster = await TestCluster.start(Redis);
  });
  after(() => {
    closeAll();
    cluster?.close();
  });

  test("a lock survives a failover, and waits are handed over", async () => {
    const rc = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
    track(rc);
    await new Promise((res) => rc.once("ready", res));
    const locks = new Relock(rc, { nodeTimeout: 2000 });
    try {
      // ttl 6 s: with 3 s, in a fresh make test at load 12, the renewals during the failover
      // got no quorum before the validity ran out (the lock was lost); the claim, renewed on
      // the new master across the failover, is the same with more slack.
      await locks.using("{orders}:1", { ttl: 6000 }, async (h) => {
        const p = await locks.acquire("{orders}:2", { limit: 2 });
        assert.ok(p.token > 0);
        const master = await cluster.masterOf("{orders}:1");
        const replica = await cluster.replicaOf(master);
        await cluster.ask(master, "WAIT", 1, 5000);
        await cluster.failover(replica, master);
        await waitOutTtl(7000, () => h.check(), 100);
        const info = await locks.info("{orders}:1");
        assert.equal(info.owner, h.owner);
        assert.equal((await cluster.masterOf("{orders}:1")).port, replica.port);
        await p.release();
      });
      assert.equal(await locks.info("{orders}:1"), null);
      const first = await locks.acquire("{jobs}:x", { ttl: 10_000 });
      const second = locks.using("{jobs}:x", { wait: 10_000 }, async (h) => assert.ok(h.token > first.token));
      assert.ok(await eventually(async () => (await locks.waiters("{jobs}:x")).length === 1, 10_000));
      await first.release();
      await second;
    } finally {
      await locks.close(); // a failed test leaves no renewal keeping the file's process alive
    }
  });

  test("groups, loss reasons and the journal on a cluster", async () => {
    const rc = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
    track(rc);
    await new Promise((res) => rc.once("ready", res));
    const locks = new Relock(rc, { nodeTimeout: 2000 });
    await locks.usingAll(["{acct}:1", "{acct}:2"], { ttl: 5000 }, async (g) => {
      assert.equal(new Set(Object.values(g.keyTokens)).size, 1);
      assert.equal(await locks.acquireAll(["{acct}:2", "{acct}:3"], { wait: 0 }), null);
      await g.renew();
    });
    assert.equal(await locks.info("{acct}:1"), null);
    await assert.rejects(locks.acquireAll(["a", "b"]), /hash slot/);
    const blocker = await locks.acquire("{acct}:2", { ttl: 10_000 });
    const waiting = locks.acquireAll(["{acct}:1", "{acct}:2"], { ttl: 5000, wait: 10_000 });
    assert.ok(await eventually(async () => (await locks.waiters("{acct}:2")).length === 1, 10_000));
    await blocker.release();
    const g = await waiting;
    assert.ok(g.keyTokens["{acct}:2"] > blocker.token);
    await rc.call("LOCK.FORCERELEASE", "{acct}:2");
    await new Promise((res) => (g.signal.aborted ? res() : g.signal.addEventListener("abort", res, { once: true })));
    assert.equal(g.lossCause, "forcereleased");
    assert.ok(g.who);
    assert.ok((await locks.log(100)).some((e) => e.key === "{acct}:2"));
    assert.ok((await locks.stats(100)).some((s) => s.key === "{acct}:2"));
    assert.equal((await locks.history("{acct}:2"))[0].reason, "forcereleased");
    await locks.close();
  });

  test("each relock command goes to its key's master: no node answers MOVED", async () => {
    const rc = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
    track(rc);
    await new Promise((res) => rc.once("ready", res));
    const locks = new Relock(rc, { nodeTimeout: 2000 });
    const moved = async () => {
      let sum = 0;
      for (const node of cluster.nodes) sum += Number(/errorstat_MOVED:count=(\d+)/.exec(String(await cluster.ask(node, "INFO", "errorstats")))?.[1] ?? 0);
      return sum;
    };
    // The package's own connection learns the slots first (its first call).
    await locks.info("warm-up");
    const before = await moved();
    // 24 keys over the three masters: sent to a master of ioredis's choice, about 2 in 3 of the
    // ~120 commands would be refused with MOVED.
    for (let i = 0; i < 24; i++) {
      const h = await locks.acquireOrThrow(`{r${i}}`, { ttl: 10_000 });
      await h.renew();
      assert.equal(await h.fenced("INCR", `{r${i}}:n`), 1);
      assert.equal((await locks.info(`{r${i}}`)).owner, h.owner);
      await h.release();
    }
    assert.equal(await moved(), before);
    await locks.close();
  });

  test("elections and fenced writes on a cluster: routed to the key's master", async () => {
    const rc = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
    track(rc);
    await new Promise((res) => rc.once("ready", res));
    const locks = new Relock(rc, { nodeTimeout: 2000 });
    const master = await cluster.masterOf("{svc}:leader");
    // The observers blocked on the key's master (INFO relock): observe reports the leader after
    // each wake-up, not every term between two (spec), so each change is made only once the
    // observer waits on the server again.
    const observers = async () => Number(/observers:(\d+)/.exec(String(await cluster.ask(master, "INFO", "relock")))?.[1]);
    const seen = [];
    const ac = new AbortController();
    const watching = (async () => {
      for await (const c of locks.observe("{svc}:leader", { signal: ac.signal })) seen.push(c);
    })();
    try {
      assert.ok(await eventually(() => seen.length === 1, 10_000));
      assert.ok(await eventually(async () => (await observers()) === 1, 10_000));
      const lead = await locks.campaign("{svc}:leader", "n1", { ttl: 5000 });
      assert.equal((await locks.leader("{svc}:leader")).term, lead.term);
      assert.equal(await lead.fenced("SET", "{svc}:config", "v1"), "OK");
      assert.equal(await rc.get("{svc}:config"), "v1");
      assert.ok(await eventually(() => seen.length === 2, 10_000));
      assert.ok(await eventually(async () => (await observers()) === 1, 10_000));
      await lead.resign();
      await assert.rejects(lead.fenced("SET", "{svc}:config", "v2"), (e) => e.name === "StaleTokenError");
      assert.ok(await eventually(() => seen.length === 3, 10_000));
      assert.deepEqual(seen.map((c) => c.leader?.value ?? null), [null, "n1", null]);
    } finally {
      ac.abort();
      await watching;
    }
    await locks.close();
  });

  test("replica acknowledgements: WAIT goes with the write to the key's master", async () => {
    const rc = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
    track(rc);
    await new Promise((res) => rc.once("ready", res));
    const locks = new Relock(rc, { nodeTimeout: 2000, replicaAcks: 1, replicaAckTimeout: 200 });
    try {
      const key = "{acks}:1";
      const master = await cluster.masterOf(key);
      const replica = await cluster.replicaOf(master);
      // Acknowledged: a grant, a renewal, and a campaign granted by LOCK.WAIT.
      const hold = await locks.acquireOrThrow(key, { ttl: 5000, wait: 0 });
      await hold.renew();
      const lead = locks.campaign(key, "b", { ttl: 5000 });
      assert.ok(await eventually(async () => (await locks.leader(key))?.waiters === 1, 10_000));
      await hold.release();
      await (await lead).resign();
      // The key's master's replica stopped: only that master's grants fail, and it is named. A
      // WAIT sent to another master (no write of its connection to wait for) would count 1.
      replica.pause();
      try {
        const named = (e) => e.message.includes(`master 127.0.0.1:${master.port}: only 0 of 1 required replica acknowledgements within 200 ms`);
        await assert.rejects(locks.acquireOrThrow(key, { ttl: 5000, wait: 0 }), named);
        await assert.rejects(locks.campaign(key, "c", { ttl: 5000, timeout: 0 }), named);
        assert.equal(await cluster.ask(master, "LOCK.INFO", key), null);
        let others = 0;
        for (const k of ["{b}:1", "{z}:1", "{x}:1"]) {
          if ((await cluster.masterOf(k)).port === master.port) continue;
          const other = await locks.acquireOrThrow(k, { ttl: 5000, wait: 0 });
          await other.release();
          others += 1;
        }
        assert.ok(others >= 1);
      } finally {
        replica.resume();
      }
    } finally {
      await locks.close();
    }
  });
  test("replica acknowledgements follow one ASK or MOVED while the key's slot migrates (the write did not run there)", async () => {
    const rc = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
    track(rc);
    await new Promise((res) => rc.once("ready", res));
    const locks = new Relock(rc, { nodeTimeout: 5000, replicaAcks: 1, replicaAckTimeout: 1000 });
    const key = "{mv}";
    const src = await cluster.masterOf(key);
    let dst;
    for (const n of cluster.nodes) if (n.port !== src.port && (await cluster.role(n)) === "master") dst = n;
    const slot = Number(await cluster.ask(src, "CLUSTER", "KEYSLOT", key));
    const srcId = String(await cluster.ask(src, "CLUSTER", "MYID"));
    const dstId = String(await cluster.ask(dst, "CLUSTER", "MYID"));
    const errors = async (node, kind) => Number(new RegExp(`errorstat_${kind}:count=(\\d+)`).exec(String(await cluster.ask(node, "INFO", "errorstats")))?.[1] ?? 0);
    try {
      await cluster.ask(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcId);
      await cluster.ask(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstId);
      // The key is not at the source: it answers ASK, and the grant is made (and acknowledged)
      // at the importing master.
      const asks = await errors(src, "ASK");
      const hold = await locks.acquireOrThrow(key, { ttl: 5000, wait: 0 });
      assert.ok((await errors(src, "ASK")) > asks, "the source answered no ASK: the case did not happen");
      const atDst = track(new Redis(dst.port, { host: "127.0.0.1" }));
      await atDst.call("ASKING");
      assert.ok(JSON.stringify(await atDst.call("LOCK.INFO", key)).includes(hold.owner));
      await hold.release();
      // The slot moved: the connection's map still names the source, which answers MOVED.
      for (const node of cluster.nodes) if ((await cluster.role(node)) === "master") await cluster.ask(node, "CLUSTER", "SETSLOT", slot, "NODE", dstId);
      const again = await locks.acquireOrThrow(key, { ttl: 5000, wait: 0 });
      assert.ok(JSON.stringify(await cluster.ask(dst, "LOCK.INFO", key)).includes(again.owner));
      await again.release();
    } finally {
      for (const node of cluster.nodes) if ((await cluster.role(node)) === "master") await cluster.ask(node, "CLUSTER", "SETSLOT", slot, "NODE", dstId);
      await locks.close();
    }
  });
});
