// The process around a hold: one that ends holding a lock, one that waited and quits its client,
// one that dies of an uncaught exception.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { after, test } from "node:test";
import process from "node:process";

import { connect, relock, closeAll, withServer, held, DIST, IOREDIS, runNode } from "./helpers.mjs";
import { eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock } = require("../dist/index.js");
const Redis = require("ioredis").default;

after(closeAll);

// From relock.test.mjs (the behaviour cases of relock-client).
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

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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

// From attack.test.mjs (an attack on the package: a break found and fixed since, or one it held).
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
