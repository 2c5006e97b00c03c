// Redlock against real servers (three masters): quorums, paused masters, fencing tokens, the
// restart grace, and a paused master costing a round no more than its deadline.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, test } from "node:test";

import { connect, relock, closeAll, withServers, lost, held, waitOutTtl, deadline } from "./helpers.mjs";
import { Server, eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock, InvalidArgumentError } = require("../dist/index.js");

after(closeAll);

// From relock.test.mjs (the behaviour cases of relock-client).
test("Redlock with a paused master, and a limit refused over masters", () =>
  withServers(3, async (servers) => {
    const locks = new Relock(servers.map((s) => connect(s)));
    assert.equal(locks.quorum, 2);
    await assert.rejects(locks.acquire("k", { limit: 2 }), (e) => e instanceof InvalidArgumentError && /\{A,B\}/.test(e.message));
    servers[2].pause();
    try {
      const started = performance.now();
      // A 3 s lease: renewed every third of it by the two masters left, on a machine busy
      // with other suites (a 1 s lease missed its renewal there: CI, 2026-12-02).
      await locks.using("rl", { ttl: 3000 }, async (h) => {
        assert.ok(performance.now() - started < 5000);
        assert.equal(Object.keys(h.tokens).length, 2);
        await waitOutTtl(7000, () => h.check());
        servers[1].pause();
        await new Promise((res) => h.signal.addEventListener("abort", res, { once: true }));
        // The signal is a timer at the end of validity; a loaded machine runs timers late (seen
        // 50+ ms at load 11). What must never be late is `lost`, read from the clock.
        assert.ok(performance.now() <= h.validUntil + 1000);
      assert.equal(h.lost, true);
      });
    } finally {
      servers.forEach((s) => s.resume());
    }
    const first = await locks.acquire("rl2", { ttl: 10_000, wait: 0 });
    const admins = servers.map((s) => connect(s));
    const queued = async () => (await Promise.all(admins.map((c) => c.call("LOCK.WAITERS", "rl2")))).filter((w) => w.length === 1).length >= 2;
    const later = locks.using("rl2", { ttl: 10_000, wait: 10_000 }, async (h) => {
      for (const [server, t] of Object.entries(h.tokens)) if (first.tokens[server]) assert.ok(t > first.tokens[server]);
    });
    assert.ok(await eventually(queued, 10_000), "the second hold never waited on a quorum");
    await first.release();
    await later;
    await locks.close();
  }));

// From relock.test.mjs (the behaviour cases of relock-client).
// A stopped master still accepts connections (its kernel does) and never answers. Every call
// to it is bounded by nodeTimeout whatever state its connection is in (connected, or
// reconnecting with the command in ioredis's offline queue), so round after round the two
// others carry on.
test("adversarial: a paused master costs a round its deadline and no more", () =>
  withServers(3, async (servers) => {
    const clients = servers.map((s) => connect(s));
    // nodeTimeout 500 ms, not the default 100: at a load average of 14 a live master's release
    // can answer after 100 ms and the release, confirmed by one master of three, says false
    // (Python's twin of this test failed so in `make test`); a round is still bounded by two
    // deadlines, far under the 2 s asserted.
    const locks = new Relock(clients, { nodeTimeout: 500 });
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

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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
      // The waits cut once two had granted have left every queue: no late grant can land.
      const admins = servers.map((s) => connect(s));
      const queues = async () => (await Promise.all(admins.flatMap((c) => holds.map((x) => c.call("LOCK.WAITERS", x.key))))).every((w) => w.length === 0);
      assert.ok(await eventually(queues, 5000));
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
        const lost = await deadline(new Promise((r) => h.signal.addEventListener("abort", () => r(true))), 2000, false);
        assert.equal(lost, false, `one paused master ended the hold (kept by ${JSON.stringify(where)}): ${h.reason}`);
      } finally {
        stop.resume();
      }
      await locks.close();
    }),
);

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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

// From more.test.mjs (what the module added after the first packages).
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
    closeAll();
    [...plain, grace].forEach((x) => x.close());
  }
});

// Found in the Java review (2026-12-02, finding 7, shared with Node): a renewal the quorum
// answered nil (the lock forcereleased) was acted on only after LOCK.HISTORY asked the servers
// why, a node timeout for a stopped one first in line; all that time `lost` was false and
// `check()` passed although the client knew the key was taken. They say lost from the nil; the
// signal aborts with the reason once it is in.
test("a renewal answered nil says lost before the reason is in", () =>
  withServers(3, async (servers) => {
    const admins = servers.map((s) => connect(s));
    const locks = new Relock(servers.map((s) => connect(s)), { nodeTimeout: 2000 });
    servers[0].pause();
    try {
      // A renewal round waits for the stopped master (its node timeout): the lease outlasts it.
      const h = await locks.acquire("nil", { ttl: 10_000, wait: 0 });
      assert.ok(h);
      for (const a of admins.slice(1)) await a.call("LOCK.FORCERELEASE", "nil");
      let abortedAtFirst;
      const seen = () => {
        if (!h.lost) return false;
        abortedAtFirst = h.signal.aborted;
        return true;
      };
      assert.ok(await eventually(seen, 20_000, 1), "the nil renewal was never seen");
      assert.equal(abortedAtFirst, false, "the reason was in when `lost` first said so");
      assert.throws(() => h.check(), /LOCK.RENEW answered nil/);
      await lost(h);
      assert.equal(h.lossCause, "forcereleased", h.reason);
    } finally {
      servers[0].resume();
    }
    await locks.close();
  }));
