// The Node client against real servers: the behaviour cases of relock-client.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { spawnSync } from "node:child_process";
import { after, before, describe, test } from "node:test";
import process from "node:process";

import { Server, SlowProxy, TestCluster, eventually, sleep } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock, NotAcquiredError, LockLostError, ServerError, OtherLimitError, InvalidArgumentError } = require("../dist/index.js");
const Redis = require("ioredis").default;
const { Cluster } = require("ioredis");

const opened = [];
function connect(server, protocol = 3, extra = {}) {
  const r = new Redis({ port: server.port, host: "127.0.0.1", protocol, maxRetriesPerRequest: 2, ...extra });
  opened.push(r);
  return r;
}
after(() => opened.forEach((r) => r.disconnect()));

function closeClients() {
  for (const r of opened.splice(0)) r.disconnect();
}

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

const infoField = async (r, field) => Number(/relock_([a-z_]+):/.test("") || String(await r.call("INFO", "relock")).match(new RegExp(`relock_${field}:(\\d+)`))[1]);

for (const protocol of [3, 2]) {
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

  test(`loss is signalled with a reason within validity (RESP${protocol})`, () =>
    withServer(async (s) => {
      const r = connect(s, protocol);
      const locks = new Relock(r);
      await locks.using("k", { ttl: 1500 }, async (hold) => {
        assert.equal(await r.call("LOCK.FORCERELEASE", "k"), 1);
        await new Promise((res) => hold.signal.addEventListener("abort", res, { once: true }));
        assert.ok(performance.now() < hold.validUntil);
        assert.ok(hold.signal.reason instanceof LockLostError);
        assert.match(hold.reason, /LOCK.RENEW answered nil/);
        // The module keeps LOCK.HISTORY: the reason is the server's, not a guess.
        assert.equal(hold.lossCause, "forcereleased", hold.reason);
        assert.match(hold.reason, /LOCK\.FORCERELEASE/);
        assert.doesNotMatch(hold.reason, /cannot say why/);
        // Who broke it: the journal names the connection that sent LOCK.FORCERELEASE.
        const [entry] = await r.call("LOCK.HISTORY", "k", "1");
        const info = Array.isArray(entry) ? entry[entry.indexOf("client-info") + 1] : entry["client-info"];
        assert.match(String(info), new RegExp(`\\bid=${await r.client("ID")} `));
        assert.equal(hold.signal.reason.retryable, false);
        assert.throws(() => hold.check(), LockLostError);
      });
      assert.equal(await locks.info("k"), null);
      await locks.close();
    }));

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
}

test("owner prefixes", () =>
  withServer(async (s) => {
    const r = connect(s);
    await new Relock(r, { ownerPrefix: "billing" }).using("k", async (h) => assert.match(h.owner, /^billing\/[0-9a-f]{32}$/));
    await new Relock(r, { ownerPrefix: "" }).using("k", async (h) => assert.match(h.owner, /^[0-9a-f]{32}$/));
    assert.equal(Buffer.byteLength(new Relock(r, { ownerPrefix: "x".repeat(500) }).newOwner()), 256);
  }));

test("concurrent tasks on one client exclude each other", () =>
  withServer(async (s) => {
    const locks = new Relock(connect(s));
    const h = await locks.acquire("k", { wait: 0 });
    assert.equal(await locks.acquire("k", { wait: 0 }), null);
    await assert.rejects(locks.using("k", { wait: 200 }, () => {}), (e) => e instanceof NotAcquiredError && e.retryable && /held by another owner/.test(e.message));
    assert.equal(await h.release(), true);
    await locks.close();
  }));

test("waiters are served first in, first out", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    const first = await locks.acquire("q", { ttl: 10_000 });
    const order = [];
    const workers = [];
    for (const [i, name] of ["w1", "w2", "w3"].entries()) {
      workers.push(locks.using("q", { ttl: 10_000, wait: 30_000 }, async (h) => order.push([name, h.token])));
      assert.ok(await eventually(async () => (await locks.info("q"))?.waiters === i + 1));
    }
    await first.release();
    await Promise.all(workers);
    assert.deepEqual(order.map(([n]) => n), ["w1", "w2", "w3"]);
    const tokens = [first.token, ...order.map(([, t]) => t)];
    assert.deepEqual([...tokens].sort((x, y) => x - y), tokens);
    assert.equal(await infoField(r, "granted_total"), 3);
    await locks.close();
  }));

// Without a limit, a wait is one LOCK.WAIT without a timeout, not a series of short ones
// (each would leave the queue and join it again at its end).
test("a wait without limit queues once", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    const first = await locks.acquire("q", { ttl: 10_000, wait: 0 });
    const waiting = locks.acquire("q", { ttl: 10_000 });
    assert.ok(await eventually(async () => (await locks.info("q"))?.waiters === 1));
    await sleep(1000); // ten node timeouts
    assert.equal(await infoField(r, "waiters"), 1);
    // The first try (LOCK.ACQUIRE, refused) and the one wait.
    assert.equal(await infoField(r, "contended_total"), 2);
    await first.release();
    const second = await waiting;
    assert.ok(second.token > first.token);
    await second.release();
    await locks.close();
  }));

test("renewal keeps a hold past its ttl and stops at release", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    await locks.using("job", { ttl: 600 }, async (h) => {
      const end = performance.now() + 2000;
      while (performance.now() < end) {
        h.check();
        await sleep(50);
      }
      assert.equal((await locks.info("job")).token, h.token);
      assert.ok((await infoField(r, "renewed_total")) >= 2);
      await h.renew(60_000);
      assert.ok((await locks.info("job")).ttl > 50_000);
    });
    const renewed = await infoField(r, "renewed_total");
    await sleep(500);
    assert.equal(await infoField(r, "renewed_total"), renewed);
    await locks.close();
  }));

test("semaphore, limits and errors", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    const p1 = await locks.acquire("enc", { limit: 2 });
    const p2 = await locks.acquire("enc", { limit: 2 });
    assert.equal(await locks.acquire("enc", { limit: 2, wait: 0 }), null);
    await assert.rejects(locks.acquire("enc", { limit: 3, wait: 0 }), (e) => e instanceof OtherLimitError && e.limit === 2 && !e.retryable && e.servers[0] === locks.servers[0]);
    setTimeout(() => void p1.release(), 200);
    await locks.using("enc", { limit: 2, wait: 10_000 }, async (p3) => assert.ok(p3.token > p2.token));
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

test("Redlock with a paused master, and a limit refused over masters", () =>
  withServers(3, async (servers) => {
    const locks = new Relock(servers.map((s) => connect(s)));
    assert.equal(locks.quorum, 2);
    await assert.rejects(locks.acquire("k", { limit: 2 }), (e) => e instanceof InvalidArgumentError && /\{A,B\}/.test(e.message));
    servers[2].pause();
    try {
      const started = performance.now();
      await locks.using("rl", { ttl: 1000 }, async (h) => {
        assert.ok(performance.now() - started < 5000);
        assert.equal(Object.keys(h.tokens).length, 2);
        const end = performance.now() + 2500;
        while (performance.now() < end) {
          h.check();
          await sleep(50);
        }
        servers[1].pause();
        await new Promise((res) => h.signal.addEventListener("abort", res, { once: true }));
        // The signal is a timer at the end of validity; a loaded machine runs timers late (seen
      // 50+ ms at load 11). What must never be late is `lost`, read from the clock.
      assert.ok(performance.now() <= h.validUntil + 500);
      assert.equal(h.lost, true);
      });
    } finally {
      servers.forEach((s) => s.resume());
    }
    const first = await locks.acquire("rl2", { ttl: 10_000, wait: 0 });
    setTimeout(() => void first.release(), 300);
    await locks.using("rl2", { ttl: 10_000, wait: 10_000 }, async (h) => {
      for (const [server, t] of Object.entries(h.tokens)) if (first.tokens[server]) assert.ok(t > first.tokens[server]);
    });
    await locks.close();
  }));

// Renewals go through the application's client, so they resume when ioredis has reconnected:
// its default waits 50 ms plus up to 200 ms of jitter after a drop. The connection is dropped
// every 250 ms for 3 s, down most of the time, and the 1.2 s hold must be renewed across it.
test("adversarial: a connection dropped mid-renewal", () =>
  withServer(async (s) => {
    const r = connect(s);
    const admin = connect(s);
    const locks = new Relock(r);
    await locks.using("k", { ttl: 1200 }, async (h) => {
      const first = h.validUntil;
      for (let i = 0; i < 12; i++) {
        await admin.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
        await sleep(250);
      }
      h.check();
      assert.ok(h.validUntil > first + 1500, "renewed across the drops");
      assert.equal((await locks.info("k")).owner, h.owner);
    });
    await locks.close();
  }));

// A stopped master still accepts connections (its kernel does) and never answers. Every call
// to it is bounded by nodeTimeout whatever state its connection is in (connected, or
// reconnecting with the command in ioredis's offline queue), so round after round the two
// others carry on.
test("adversarial: a paused master costs a round its deadline and no more", () =>
  withServers(3, async (servers) => {
    const clients = servers.map((s) => connect(s));
    const locks = new Relock(clients);
    // Connected to every master first (a loaded machine may take a while): over several
    // masters a round waits for none longer than nodeTimeout, even for a first connection.
    assert.ok(await eventually(async () => clients.every((c) => c.status === "ready")));
    servers[2].pause();
    try {
      let granted = 0;
      for (let i = 0; i < 30; i++) {
        const started = performance.now();
        const h = await locks.acquire(`k${i}`, { ttl: 5000, wait: 0 });
        if (h) {
          granted += 1;
          assert.deepEqual(Object.keys(h.tokens).sort(), locks.servers.slice(0, 2).sort());
          assert.ok(await h.release());
        }
        // A release waits for every master: the paused one costs it nodeTimeout.
        assert.ok(performance.now() - started < 2000, `round ${i} took ${performance.now() - started} ms`);
      }
      // Each round needs both others within 100 ms, which a loaded machine sometimes misses.
      assert.ok(granted >= 20, `granted ${granted} of 30`);
      // A client that must first connect to the paused master: connecting counts too.
      const fresh = new Relock(servers.map((s) => connect(s)));
      const started = performance.now();
      await fresh.using("fresh", { wait: 5000 }, (h) => assert.equal(Object.keys(h.tokens).length, 2));
      assert.ok(performance.now() - started < 5000);
      await fresh.close();
    } finally {
      servers[2].resume();
    }
    await locks.close();
  }));

test("adversarial: a paused server costs a call its deadline", () =>
  withServer(async (s) => {
    const locks = new Relock(connect(s));
    assert.equal(await locks.info("k"), null);
    s.pause();
    try {
      for (let i = 0; i < 3; i++) {
        const started = performance.now();
        assert.equal(await locks.acquire("k", { wait: 0 }), null);
        assert.ok(performance.now() - started < 1000);
      }
      // A client that was never connected waits up to 2 s for its first connection (a process
      // starting up does not know yet how far its server is), not forever.
      const fresh = new Relock(connect(s));
      for (let i = 0; i < 2; i++) {
        const started = performance.now();
        assert.equal(await fresh.acquire("k", { wait: 0 }), null);
        assert.ok(performance.now() - started < 4000);
      }
      await assert.rejects(locks.info("k"), (e) => e instanceof ServerError && e.retryable && /no reply within/.test(e.message));
    } finally {
      s.resume();
    }
    await locks.close();
  }));

// Connecting takes 300 ms (each new connection), a command 0.1 ms, nodeTimeout is 100 ms. A
// client of one server waits for its first connection (up to 2 s); later ones are ioredis's
// reconnections, which go on in the background while calls give up at their deadline.
test("adversarial: a server slow to connect to", () =>
  withServer(async (s) => {
    const proxy = await SlowProxy.start(s.port, 300);
    try {
      const r = new Redis({ port: proxy.port, host: "127.0.0.1", retryStrategy: () => 10 });
      opened.push(r);
      const locks = new Relock(r);
      let started = performance.now();
      const h = await locks.acquire("k", { ttl: 5000, wait: 0 });
      assert.ok(h && performance.now() - started < 2000);
      await h.release();
      await connect(s).call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
      await eventually(async () => r.status !== "ready");
      started = performance.now();
      assert.equal(await locks.acquire("k", { wait: 0 }), null); // gave up while reconnecting
      assert.ok(performance.now() - started < 1000);
      await locks.using("k", { ttl: 5000, wait: 5000 }, () => assert.ok(performance.now() - started < 5000));
      await locks.close();
    } finally {
      proxy.close();
    }
  }));

test("adversarial: a stopped server ends the hold within validity", () =>
  withServer(async (s) => {
    const locks = new Relock(connect(s));
    const h = await locks.acquire("k", { ttl: 900 });
    s.pause();
    try {
      await new Promise((res) => h.signal.addEventListener("abort", res, { once: true }));
      // The signal is a timer at the end of validity; a loaded machine runs timers late (seen
      // 50+ ms at load 11). What must never be late is `lost`, read from the clock.
      assert.ok(performance.now() <= h.validUntil + 500);
      assert.equal(h.lost, true);
      assert.match(h.reason, /validity ran out/);
    } finally {
      s.resume();
    }
    await locks.close();
  }));

test("adversarial: an event loop blocked longer than the ttl", () =>
  withServer(async (s) => {
    const locks = new Relock(connect(s));
    await locks.using("k", { ttl: 300 }, async (h) => {
      const end = performance.now() + 600;
      while (performance.now() < end); // blocks the loop: no timer runs
      assert.equal(h.lost, true); // read from the clock, before any timer ran
      assert.throws(() => h.check(), (e) => e instanceof LockLostError && /event loop/.test(e.message));
      assert.equal(h.signal.aborted, true);
    });
    await locks.close();
  }));

test("adversarial: a process that ends holding a lock", () =>
  withServer(async (s) => {
    const child = (ending) => {
      const code = `
        const { Relock } = require(${JSON.stringify(require.resolve("../dist/index.js"))});
        const Redis = require(${JSON.stringify(require.resolve("ioredis"))}).default;
        const r = new Redis(${s.port});
        const locks = new Relock(r);
        locks.acquire("exit-" + ${JSON.stringify(ending)}, { ttl: ${ending === "close" ? 60000 : 1000} }).then(async (h) => {
          console.log(h.token);
          if (${JSON.stringify(ending)} === "close") { await locks.close(); await r.quit(); }
          else process.exit(0);
        });
      `;
      const out = spawnSync(process.execPath, ["-e", code], { encoding: "utf8", timeout: 60_000 });
      assert.equal(out.status, 0, out.stderr);
      assert.ok(Number(out.stdout) > 0);
    };
    const locks = new Relock(connect(s));
    // locks.close() on the way out releases every hold still held...
    child("close");
    assert.equal(await locks.info("exit-close"), null);
    // ...and a process that exits without it keeps its lock no longer than its lease.
    const exited = performance.now();
    child("exit");
    assert.ok(await eventually(async () => (await locks.info("exit-exit")) === null, 20_000));
    assert.ok(performance.now() - exited < 20_000);
  }));

describe("cluster", () => {
  let cluster;
  before(async () => {
    cluster = await TestCluster.start(Redis);
  });
  after(() => {
    closeClients();
    cluster?.close();
  });

  test("a lock survives a failover, and waits are handed over", async () => {
    const rc = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
    opened.push(rc);
    await new Promise((res) => rc.once("ready", res));
    const locks = new Relock(rc, { nodeTimeout: 2000 });
    await locks.using("{orders}:1", { ttl: 3000 }, async (h) => {
      const p = await locks.acquire("{orders}:2", { limit: 2 });
      assert.ok(p.token > 0);
      const master = await cluster.masterOf("{orders}:1");
      const replica = await cluster.replicaOf(master);
      await cluster.ask(master, "WAIT", 1, 5000);
      await cluster.failover(replica, master);
      const end = performance.now() + 4000;
      while (performance.now() < end) {
        h.check();
        await sleep(100);
      }
      const info = await locks.info("{orders}:1");
      assert.equal(info.owner, h.owner);
      assert.equal((await cluster.masterOf("{orders}:1")).port, replica.port);
      await p.release();
    });
    assert.equal(await locks.info("{orders}:1"), null);
    const first = await locks.acquire("{jobs}:x", { ttl: 10_000 });
    setTimeout(() => void first.release(), 300);
    await locks.using("{jobs}:x", { wait: 10_000 }, async (second) => assert.ok(second.token > first.token));
    await locks.close();
  });

  test("groups, loss reasons and the journal on a cluster", async () => {
    const rc = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
    opened.push(rc);
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
    setTimeout(() => void blocker.release(), 300);
    const g = await locks.acquireAll(["{acct}:1", "{acct}:2"], { ttl: 5000, wait: 10_000 });
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
});
