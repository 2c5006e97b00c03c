// The send-once rule (spec/client-cases/README.md): a fenced write (hold.fenced) is sent at most
// once. Its reply lost (the connection reset after the server ran it, or no reply in time) is an
// error that says it may have run, and the write is never sent again, on one server or in a
// cluster; a refusal that says it did not run (MOVED after a failover) is followed. Each case
// counts how many times the inner INCR ran.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";

import { closeAll, connectPort as connect, proxy, relock, track, waitOutTtl, withServer } from "./helpers.mjs";
import { CutProxy, TestCluster, eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { ServerError } = require("../dist/index.js");
const Redis = require("ioredis").default;
const { Cluster } = require("ioredis");

after(closeAll);

const MAY_HAVE_RUN = /it may have run/;
/** A rejection that says the fenced write may have run. */
const mayHaveRun = (e) => e instanceof ServerError && MAY_HAVE_RUN.test(e.message);

test("a fenced write whose reply was lost is not sent again (one server)", () =>
  withServer(async (s) => {
    const p = await proxy(s.port);
    const direct = connect(s.port);
    // maxRetriesPerRequest and the default autoResendUnfulfilledCommands: what a client given
    // to Relock may well have.
    const locks = relock(connect(p.port, { maxRetriesPerRequest: 20 }), { nodeTimeout: 500 });
    const h = await locks.acquireOrThrow("{so}", { ttl: 30_000 });
    p.cutReplyTo("LOCK.FENCED");
    await assert.rejects(h.fenced("INCR", "{so}:n"), mayHaveRun);
    assert.equal(p.cuts, 1);
    // A re-send would come within a reconnect (ioredis: 50 ms): the count stays 1 meanwhile.
    await waitOutTtl(500, async () => assert.equal(await direct.get("{so}:n"), "1"));
    // No reply in time (writes paused on the server): the same, and it runs once when they resume.
    await direct.call("CLIENT", "PAUSE", 60_000, "WRITE");
    try {
      await assert.rejects(h.fenced("INCR", "{so}:n"), mayHaveRun);
    } finally {
      await direct.call("CLIENT", "UNPAUSE");
    }
    assert.ok(await eventually(async () => (await direct.get("{so}:n")) === "2", 5000));
    assert.equal(await h.fenced("INCR", "{so}:n"), 3);
    assert.equal(await direct.get("{so}:n"), "3");
    await h.release();
  }));

// LOCK.FORCERELEASE is sent once too: run a second time after its reply was lost, it removes
// whatever hold another owner took of the key since (an operator's force-release meant for the
// old holder takes the new holder's lock). Each case counts its runs on the server.
const FORCE_MAY_HAVE_RUN = /LOCK\.FORCERELEASE .*\(it may have run; it was not sent again\)/;
const forceMayHaveRun = (e) => e instanceof ServerError && FORCE_MAY_HAVE_RUN.test(e.message);
/** How many times a server ran LOCK.FORCERELEASE (its `INFO commandstats`). */
const forceRuns = (info) => Number(/cmdstat_LOCK\.FORCERELEASE:calls=(\d+)/.exec(String(info))?.[1] ?? 0);

test("a force-release whose reply was lost is not sent again (one server)", () =>
  withServer(async (s) => {
    const p = await proxy(s.port);
    const direct = connect(s.port);
    const locks = relock(connect(p.port, { maxRetriesPerRequest: 20 }), { nodeTimeout: 500 });
    await locks.acquireOrThrow("{fr}", { ttl: 30_000 });
    p.cutReplyTo("LOCK.FORCERELEASE");
    await assert.rejects(locks.forceRelease("{fr}"), forceMayHaveRun);
    assert.equal(p.cuts, 1);
    await waitOutTtl(500, async () => assert.equal(forceRuns(await direct.info("commandstats")), 1));
    assert.equal(await locks.info("{fr}"), null); // it ran: the hold is gone
    await locks.acquireOrThrow("{fr}", { ttl: 30_000 });
    assert.equal(await locks.forceRelease("{fr}"), 1);
  }));

describe("cluster", () => {
  let cluster;
  const proxies = new Map();
  before(async () => {
    cluster = await TestCluster.start(Redis);
    for (const n of cluster.nodes) proxies.set(n.port, await CutProxy.start(n.port));
  });
  after(() => {
    closeAll();
    for (const p of proxies.values()) p.close();
    cluster?.close();
  });

  /** A cluster client that reaches every node through its CutProxy (natMap). */
  async function proxied(extra = {}) {
    const natMap = Object.fromEntries([...proxies].map(([port, p]) => [`127.0.0.1:${port}`, { host: "127.0.0.1", port: p.port }]));
    const rc = track(new Cluster([{ host: "127.0.0.1", port: proxies.get(cluster.nodes[0].port).port }], { natMap, ...extra }));
    rc.on("error", () => undefined);
    await new Promise((res) => rc.once("ready", res));
    return rc;
  }
  const counter = async (key) => cluster.ask(await cluster.masterOf(key), "GET", key);

  test("a fenced write whose reply was lost, or came late, is not sent again (cluster)", async () => {
    const rc = await proxied({ retryDelayOnFailover: 100, redisOptions: { maxRetriesPerRequest: 20 } });
    const locks = relock(rc, { nodeTimeout: 500 });
    const h = await locks.acquireOrThrow("{sc}", { ttl: 60_000 });
    const master = await cluster.masterOf("{sc}");
    const p = proxies.get(master.port);
    p.cutReplyTo("LOCK.FENCED");
    await assert.rejects(h.fenced("INCR", "{sc}:n"), mayHaveRun);
    assert.equal(p.cuts, 1);
    await waitOutTtl(500, async () => assert.equal(await counter("{sc}:n"), "1"));
    await cluster.ask(master, "CLIENT", "PAUSE", 60_000, "WRITE");
    try {
      await assert.rejects(h.fenced("INCR", "{sc}:n"), mayHaveRun);
    } finally {
      await cluster.ask(master, "CLIENT", "UNPAUSE");
    }
    assert.ok(await eventually(async () => (await counter("{sc}:n")) === "2", 5000));
    await waitOutTtl(300, async () => assert.equal(await counter("{sc}:n"), "2"));
    assert.equal(await h.fenced("INCR", "{sc}:n"), 3);
    await h.release();
    await locks.close();
  });

  test("a force-release whose reply was lost is not sent again (cluster)", async () => {
    // retryDelayOnFailover and maxRetriesPerRequest: a client given to Relock that re-sends
    // after a lost connection by itself.
    const rc = await proxied({ retryDelayOnFailover: 100, redisOptions: { maxRetriesPerRequest: 20 } });
    const locks = relock(rc, { nodeTimeout: 500 });
    await locks.acquireOrThrow("{sf}", { ttl: 60_000 });
    const master = await cluster.masterOf("{sf}");
    const p = proxies.get(master.port);
    const runs = async () => forceRuns(await cluster.ask(master, "INFO", "commandstats"));
    const before = await runs();
    const cuts = p.cuts;
    p.cutReplyTo("LOCK.FORCERELEASE");
    await assert.rejects(locks.forceRelease("{sf}"), forceMayHaveRun);
    assert.equal(p.cuts, cuts + 1);
    await waitOutTtl(500, async () => assert.equal((await runs()) - before, 1));
    await locks.acquireOrThrow("{sf}", { ttl: 60_000 });
    assert.equal(await locks.forceRelease("{sf}"), 1);
    await locks.close();
  });

  test("a fenced write follows MOVED after a failover and runs once (cluster)", async () => {
    const rc = await proxied();
    const locks = relock(rc, { nodeTimeout: 5000 }); // a loaded machine: a refresh of the slots and a redirection
    const h = await locks.acquireOrThrow("{fo}", { ttl: 60_000 });
    assert.equal(await h.fenced("INCR", "{fo}:n"), 1);
    const master = await cluster.masterOf("{fo}");
    const replica = await cluster.replicaOf(master);
    await cluster.ask(master, "WAIT", 1, 5000);
    await cluster.failover(replica, master);
    // Every node says the slot is the new master's (no MOVED ping-pong while the news spreads).
    const slot = Number(await cluster.ask(master, "CLUSTER", "KEYSLOT", "{fo}"));
    const ownerSeenBy = async (n) => (await cluster.ask(n, "CLUSTER", "SLOTS")).find(([a, b]) => a <= slot && slot <= b)?.[2]?.[1];
    assert.ok(await eventually(async () => (await Promise.all(cluster.nodes.map(ownerSeenBy))).every((p) => Number(p) === replica.port), 20_000, 50));
    // The client's map still names the old master: the first write goes there and is refused
    // with MOVED, which says it did not run there; the client follows it (and no write is then
    // in flight on the old master when a refresh of the map drops it, which would end the
    // write with "it may have run"). Each write runs once, and only once.
    const movedAll = async () => {
      let sum = 0;
      for (const node of cluster.nodes) sum += Number(/errorstat_MOVED:count=(\d+)/.exec(String(await cluster.ask(node, "INFO", "errorstats")))?.[1] ?? 0);
      return sum;
    };
    const movedBefore = await movedAll();
    for (let n = 2; n <= 6; n++) assert.equal(await h.fenced("INCR", "{fo}:n"), n);
    assert.ok((await movedAll()) > movedBefore, "no node answered MOVED: the case did not happen");
    assert.equal(await counter("{fo}:n"), "6");
    await h.release();
    await locks.close();
  });
  test("a fenced write follows ASK while its slot migrates and runs once (cluster)", async () => {
    const rc = await proxied();
    const locks = relock(rc, { nodeTimeout: 5000 }); // a loaded machine: a refresh of the slots and a redirection
    const h = await locks.acquireOrThrow("{mg}", { ttl: 60_000 });
    assert.equal(await h.fenced("INCR", "{mg}:n"), 1);
    const src = await cluster.masterOf("{mg}");
    let dst;
    for (const n of cluster.nodes) if (n.port !== src.port && (await cluster.role(n)) === "master") dst = n;
    const slot = Number(await cluster.ask(src, "CLUSTER", "KEYSLOT", "{mg}"));
    const srcId = String(await cluster.ask(src, "CLUSTER", "MYID"));
    const dstId = String(await cluster.ask(dst, "CLUSTER", "MYID"));
    const asks = async () => Number(/errorstat_ASK:count=(\d+)/.exec(String(await cluster.ask(src, "INFO", "errorstats")))?.[1] ?? 0);
    await cluster.ask(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcId);
    await cluster.ask(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstId);
    try {
      await cluster.ask(src, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", "{mg}", "{mg}:n");
      // The write goes to the source, which answers ASK (its keys have left); each call must
      // run once, and only once.
      const before = await asks();
      let n = 1;
      while ((await asks()) === before && n < 60) {
        n += 1;
        assert.equal(await h.fenced("INCR", "{mg}:n"), n);
      }
      assert.ok((await asks()) > before, "the source answered no ASK: the case did not happen");
      const atDst = track(new Redis(dst.port, { host: "127.0.0.1" }));
      await atDst.call("ASKING");
      assert.equal(await atDst.get("{mg}:n"), String(n)); // ran at the importing master
    } finally {
      for (const node of cluster.nodes) if ((await cluster.role(node)) === "master") await cluster.ask(node, "CLUSTER", "SETSLOT", slot, "NODE", dstId);
    }
    await h.release();
    await locks.close();
  });
});
