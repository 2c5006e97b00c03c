// Helpers shared by the test files (each defined here once): clients that are closed when a
// test ends, servers for one test, reads of a server's state, child processes, and
// waitOutTtl, the one place a test lets a fixed time pass. Each test file calls
// `after(closeAll)`.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import process from "node:process";

import { CutProxy, Server, eventually, modulePath, sleep } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { Relock } = require("../dist/index.js");
const Redis = require("ioredis").default;

const opened = [];
const made = [];
const proxies = [];

/** `client` (an ioredis client made by the test), disconnected when the test ends. */
export function track(client) {
  opened.push(client);
  return client;
}

/** An ioredis client of `server`, disconnected when the test ends. */
export function connect(server, protocol = 3, extra = {}) {
  const r = new Redis({ port: server.port, host: "127.0.0.1", protocol, maxRetriesPerRequest: 2, ...extra });
  opened.push(r);
  return r;
}

/** An ioredis client of a port (a server's, or a proxy's), its errors ignored, disconnected when the test ends. */
export function connectPort(port, extra = {}) {
  const r = new Redis({ port, host: "127.0.0.1", maxRetriesPerRequest: 2, ...extra });
  r.on("error", () => undefined);
  opened.push(r);
  return r;
}

/** A Relock closed when its test ends, whatever the test did (the connections it opens for waits keep a process alive). */
export function relock(...args) {
  const l = new Relock(...args);
  made.push(l);
  return l;
}

/** A CutProxy to `port`, closed when the test ends. */
export async function proxy(port) {
  const p = await CutProxy.start(port);
  proxies.push(p);
  return p;
}

/** Closes what connect, connectPort, relock and proxy made. */
export function closeAll() {
  for (const l of made.splice(0)) void l.close().catch(() => undefined);
  for (const r of opened.splice(0)) r.disconnect();
  for (const p of proxies.splice(0)) p.close();
}

/** `fn(server)` on a server of its own (started with `args`), closed after with what the test opened. */
export async function withServer(fn, args) {
  const s = await Server.start(args);
  try {
    return await fn(s);
  } finally {
    closeAll();
    s.close();
  }
}

/** A master for replicaOf: diskless sync at once (7.0 waits 5 s for more replicas to come by default). */
export const startMaster = () => Server.start(["--repl-diskless-sync-delay", "0"]);

/**
 * A replica of `master` (with the module: it applies the LOCK.* effects the master sends),
 * returned once it acknowledges writes; the caller closes it.
 */
export async function replicaOf(master) {
  const replica = await Server.start(["--replicaof", "127.0.0.1", String(master.port)]);
  const probe = new Redis({ port: master.port, host: "127.0.0.1", lazyConnect: true, maxRetriesPerRequest: 1 });
  const linked = async () => {
    const r = await probe.call("INFO", "replication").catch(() => "");
    if (!String(r).includes(`port=${replica.port},state=online`)) return false;
    // Online, and acknowledging writes (a diskless sync puts it online at its first REPLCONF
    // ACK; a WAIT without a write before it on its connection counts it at once).
    const [, [, acked]] = await probe.pipeline().set("relock-test:linked", "1").call("WAIT", 1, 100).exec();
    return acked >= 1;
  };
  try {
    assert.ok(await eventually(linked), "the replica did not link to its master");
    return replica;
  } catch (e) {
    replica.close();
    throw e;
  } finally {
    probe.disconnect();
  }
}

/** `fn(master, replica)` on a master and one replica of it (see replicaOf); both closed after. */
export async function withReplica(fn) {
  const master = await startMaster();
  let replica;
  try {
    replica = await replicaOf(master);
    return await fn(master, replica);
  } finally {
    closeAll();
    replica?.close();
    master.close();
  }
}

/** `fn(servers)` on `n` servers of their own. */
export async function withServers(n, fn) {
  const all = [];
  try {
    for (let i = 0; i < n; i++) all.push(await Server.start());
    return await fn(all);
  } finally {
    closeAll();
    all.forEach((s) => s.close());
  }
}

/**
 * Lets `ms` pass: a ttl (or a timeout, or a stall) that must run its whole length, counted by
 * Redis or the client, with no event to wait for instead. `during()` runs every `every` ms
 * meanwhile (a check that the hold is still valid, a connection killed).
 */
export async function waitOutTtl(ms, during = null, every = 50) {
  const end = performance.now() + ms;
  for (let left = ms; left > 0; left = end - performance.now()) {
    if (during) {
      await during();
      left = Math.min(every, end - performance.now());
    }
    await sleep(Math.max(0, left));
  }
}

/** Resolves once `hold` is lost (its signal aborted). */
export const lost = (hold) => new Promise((res) => (hold.signal.aborted ? res() : hold.signal.addEventListener("abort", res, { once: true })));

/** A relock_* field of INFO relock. */
export const infoField = async (r, field) => Number(/relock_([a-z_]+):/.test("") || String(await r.call("INFO", "relock")).match(new RegExp(`relock_${field}:(\\d+)`))[1]);

/** Per server, whether it has a hold of `key` (LOCK.INFO). */
export const held = async (servers, key) => Promise.all(servers.map(async (s) => (await connect(s).call("LOCK.INFO", key)) !== null));

export const DIST = JSON.stringify(require.resolve("../dist/index.js"));
export const IOREDIS = JSON.stringify(require.resolve("ioredis"));

/** Runs `code` in a fresh node; resolves { code, signal, out, ms } or "alive" after `within` ms (then kills it). */
export function runNode(code, within) {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn(process.execPath, ["-e", code], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      resolve({ alive: true, out });
    }, within);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ alive: false, code, signal, out, ms: performance.now() - started });
    });
  });
}

/** Restarts `s` on its port, empty (no persistence): SIGKILL, then a new redis-server there. */
export async function restart(s) {
  s.kill();
  await eventually(() => s.exited, 5000);
  s.proc = spawn(process.env.REDIS_SERVER ?? "redis-server", ["--port", String(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
    "--save", "", "--appendonly", "no", "--logfile", "redis.log", "--loadmodule", modulePath()], { stdio: "ignore" });
  s.exited = false;
  s.proc.on("exit", () => (s.exited = true));
  const probe = new Redis({ port: s.port, lazyConnect: true, retryStrategy: () => 20, maxRetriesPerRequest: null });
  try {
    assert.ok(await eventually(async () => (await probe.ping().catch(() => "")) === "PONG", 10_000));
  } finally {
    probe.disconnect();
  }
}

/** `promise`, or `value` when it has not settled within `ms`: a bound on an event (it ends as soon as the event comes), never a fixed wait. */
export function deadline(promise, ms, value) {
  let timer;
  const late = new Promise((res) => {
    timer = setTimeout(() => res(value), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
