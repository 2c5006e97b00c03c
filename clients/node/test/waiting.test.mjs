// Waiting and exclusion on one server: tasks sharing a client never overlap, waits are first
// in first out, handed over, and queued once.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, test } from "node:test";

import { connect, relock, closeAll, withServer, withServers, infoField, held, waitOutTtl } from "./helpers.mjs";
import { eventually, sleep } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock, NotAcquiredError } = require("../dist/index.js");

after(closeAll);

// From relock.test.mjs (the behaviour cases of relock-client).
test("concurrent tasks on one client exclude each other", () =>
  withServer(async (s) => {
    const locks = new Relock(connect(s));
    const h = await locks.acquire("k", { wait: 0 });
    assert.equal(await locks.acquire("k", { wait: 0 }), null);
    await assert.rejects(locks.using("k", { wait: 200 }, () => {}), (e) => e instanceof NotAcquiredError && e.retryable && /held by another owner/.test(e.message));
    assert.equal(await h.release(), true);
    await locks.close();
  }));

// From relock.test.mjs (the behaviour cases of relock-client).
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

// From relock.test.mjs (the behaviour cases of relock-client).
// Without a limit, a wait is one LOCK.WAIT without a timeout, not a series of short ones
// (each would leave the queue and join it again at its end).
test("a wait without limit queues once", () =>
  withServer(async (s) => {
    const r = connect(s);
    const locks = new Relock(r);
    const first = await locks.acquire("q", { ttl: 10_000, wait: 0 });
    const waiting = locks.acquire("q", { ttl: 10_000 });
    assert.ok(await eventually(async () => (await locks.info("q"))?.waiters === 1));
    await waitOutTtl(1000); // ten node timeouts: a wait sent again after each would queue again
    assert.equal(await infoField(r, "waiters"), 1);
    // The first try (LOCK.ACQUIRE, refused) and the one wait.
    assert.equal(await infoField(r, "contended_total"), 2);
    await first.release();
    const second = await waiting;
    assert.ok(second.token > first.token);
    await second.release();
    await locks.close();
  }));

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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
              await sleep(1); // the work under the lock (not a wait): the others try meanwhile
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
