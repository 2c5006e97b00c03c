// Connections to one server: a stopped server and one slow to connect to; each call bounded by
// its deadline.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, test } from "node:test";

import { connect, proxy, closeAll, withServer, track } from "./helpers.mjs";
import { SlowProxy, eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock, ServerError } = require("../dist/index.js");
const Redis = require("ioredis").default;

after(closeAll);

// From relock.test.mjs (the behaviour cases of relock-client).
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

// From relock.test.mjs (the behaviour cases of relock-client).
// Connecting takes 300 ms (each new connection), a command 0.1 ms, nodeTimeout is 100 ms. A
// client of one server waits for its first connection (up to 2 s); later ones are ioredis's
// reconnections, which go on in the background while calls give up at their deadline.
test("adversarial: a server slow to connect to", () =>
  withServer(async (s) => {
    const proxy = await SlowProxy.start(s.port, 300);
    try {
      const r = new Redis({ port: proxy.port, host: "127.0.0.1", retryStrategy: () => 10 });
      track(r);
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
