// Real redis-servers with the relock module for the tests: each on a free port (bound to
// port 0 first), in its own directory, ready within a deadline, killed on teardown.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const REPO = resolve(import.meta.dirname, "../../..");

export function modulePath() {
  if (process.env.RELOCK_MODULE) return process.env.RELOCK_MODULE;
  for (const p of ["debug", "release"]) {
    const f = join(REPO, "target", p, "librelock.so");
    if (existsSync(f)) return f;
  }
  throw new Error("module not built: run `cargo build -p relock` (make test does)");
}

function ephemeralLow() {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32768;
  } catch {
    return 32768;
  }
}

function listenOn(port) {
  return new Promise((res, rej) => {
    const s = createServer();
    s.on("error", rej);
    s.listen(port, "127.0.0.1", () => {
      const { port: bound } = s.address();
      s.close(() => res(bound));
    });
  });
}

/**
 * A port nobody listens on, below the kernel's ephemeral range (10000 up to it): a port from
 * listen(0) is in that range, where any outgoing connection may take it between a server's
 * kill and its restart on the same port ("Address already in use", as the module's suites
 * found in a fresh make test).
 */
export async function freePort() {
  const low = ephemeralLow();
  for (let i = 0; low > 11000 && i < 200; i++) {
    const port = 10000 + Math.floor(Math.random() * (low - 10000));
    try {
      return await listenOn(port);
    } catch {
      // taken: another
    }
  }
  return listenOn(0);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Whether `check` comes true within `within` ms (a generous bound, never a fixed sleep). */
export async function eventually(check, within = 20_000, every = 10) {
  const end = performance.now() + within;
  while (performance.now() < end) {
    if (await check()) return true;
    await sleep(every);
  }
  return !!(await check());
}

function infoPid(port) {
  return new Promise((res) => {
    const sock = connect(port, "127.0.0.1");
    let data = "";
    sock.setTimeout(2000, () => { sock.destroy(); res(null); });
    sock.on("error", () => res(null));
    sock.on("connect", () => sock.write("INFO server\r\n"));
    sock.on("data", (d) => {
      data += d;
      const m = /process_id:(\d+)/.exec(data);
      if (m) { sock.destroy(); res(Number(m[1])); }
    });
  });
}

export class Server {
  static async start(args = [], { module = true } = {}) {
    const s = new Server();
    s.dir = mkdtempSync(join(tmpdir(), "relock-node-test-"));
    s.args = args;
    s.module = module;
    await s.boot();
    return s;
  }

  async boot() {
    for (let attempt = 0; attempt < 5; attempt++) {
      this.port = await freePort();
      const cmd = ["--port", String(this.port), "--bind", "127.0.0.1", "--dir", this.dir, "--save", "",
        "--appendonly", "no", "--logfile", "redis.log", "--enable-debug-command", "yes"];
      if (this.module) cmd.push("--loadmodule", modulePath());
      this.proc = spawn(process.env.REDIS_SERVER ?? "redis-server", [...cmd, ...this.args], { stdio: "ignore" });
      this.exited = false;
      this.proc.on("exit", () => { this.exited = true; });
      const end = performance.now() + 20_000;
      while (performance.now() < end && !this.exited) {
        const pid = await infoPid(this.port);
        if (pid === this.proc.pid) return;
        if (pid !== null) break; // another server took the port
        await sleep(20);
      }
      this.kill();
      if (!this.log().includes("Address already in use")) break;
    }
    throw new Error(`redis-server did not start:\n${this.log()}`);
  }

  log() {
    try { return readFileSync(join(this.dir, "redis.log"), "utf8").slice(-4000); } catch { return ""; }
  }

  pause() { this.proc.kill("SIGSTOP"); }
  resume() { this.proc.kill("SIGCONT"); }

  kill() {
    if (this.proc && !this.exited) {
      this.proc.kill("SIGCONT");
      this.proc.kill("SIGKILL");
    }
  }

  close() {
    this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Six nodes with the module, three masters and three replicas, healthy before use. */
export class TestCluster {
  // redis-cli waits, with no bound of its own, until every node knows every other: at load 12
  // one create ran past 120 s. It gets 90 s; a create that has not joined by then is tried
  // again, once, on new nodes.
  static async start(Redis) {
    try {
      return await TestCluster.startOnce(Redis);
    } catch (e) {
      if (e.code !== "ETIMEDOUT") throw e;
      console.error(`cluster: a second attempt on new nodes after: ${e.message}\n${e.stdout ?? ""}`);
      return await TestCluster.startOnce(Redis);
    }
  }

  static async startOnce(Redis) {
    const c = new TestCluster();
    c.Redis = Redis;
    c.nodes = [];
    try {
      for (let i = 0; i < 6; i++) {
        const bus = String(await freePort());
        // Diskless sync at once: by default a master waits 5 s for more replicas to come.
        c.nodes.push(await Server.start(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
          "--cluster-node-timeout", "2000", "--cluster-port", bus, "--repl-diskless-sync-delay", "0"]));
      }
      execFileSync("redis-cli", ["--cluster", "create", ...c.nodes.map((n) => `127.0.0.1:${n.port}`),
        "--cluster-replicas", "1", "--cluster-yes"], { stdio: "pipe", timeout: 90_000 });
      if (!(await eventually(() => c.healthy(), 60_000, 100))) throw new Error("cluster not healthy in time");
      return c;
    } catch (e) {
      c.close();
      throw e;
    }
  }

  async ask(n, ...args) {
    const r = new this.Redis(n.port, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
    try {
      await r.connect();
      return await r.call(...args);
    } finally {
      r.disconnect();
    }
  }

  async info(n, section) {
    const text = String(await this.ask(n, "INFO", section));
    return Object.fromEntries(text.split("\r\n").filter((l) => l.includes(":")).map((l) => l.split(":", 2)));
  }

  async role(n) {
    try { return (await this.info(n, "replication")).role; } catch { return ""; }
  }

  async healthy() {
    try {
      for (const n of this.nodes) {
        const ci = String(await this.ask(n, "CLUSTER", "INFO"));
        if (!ci.includes("cluster_state:ok") || !ci.includes("cluster_known_nodes:6")) return false;
        // Every node's view agrees: three masters, each replica known as a replica of one of
        // them. (A replica's link can be up before the others, its master included, have heard
        // that it replicates: a master ignores a manual failover started by a node it does not
        // know as its replica, and the failover never comes.)
        const view = String(await this.ask(n, "CLUSTER", "NODES")).trim().split("\n").map((l) => l.split(" "));
        const masters = new Set(view.filter((f) => f[2].split(",").includes("master")).map((f) => f[0]));
        const replicas = view.filter((f) => f[2].split(",").includes("slave")).map((f) => f[3]);
        if (masters.size !== 3 || replicas.length !== 3 || !replicas.every((m) => masters.has(m))) return false;
        if (view.some((f) => f[7] !== "connected" || /fail|handshake|noaddr/.test(f[2]))) return false;
        const r = await this.info(n, "replication");
        if (r.role === "slave" && r.master_link_status !== "up") return false;
        if (r.role === "master" && r.connected_slaves !== "1") return false;
      }
      return true;
    } catch {
      return false;
    }
  }

  async masterOf(key) {
    const slot = Number(await this.ask(this.nodes[0], "CLUSTER", "KEYSLOT", key));
    for (const [s, e, master] of await this.ask(this.nodes[0], "CLUSTER", "SLOTS")) {
      if (s <= slot && slot <= e) return this.nodes.find((n) => n.port === Number(master[1]));
    }
    throw new Error(key);
  }

  async replicaOf(master) {
    for (const n of this.nodes) {
      const r = await this.info(n, "replication");
      if (r.role === "slave" && Number(r.master_port) === master.port) return n;
    }
    throw new Error(String(master.port));
  }

  async failover(replica, oldMaster) {
    await this.ask(replica, "CLUSTER", "FAILOVER");
    const ok = await eventually(async () => (await this.role(replica)) === "master" && (await this.role(oldMaster)) === "slave", 60_000, 50);
    if (!ok) throw new Error("failover did not happen in time");
    await eventually(() => this.healthy(), 60_000, 100);
  }

  close() {
    for (const n of this.nodes) n.close();
  }
}

/**
 * A TCP proxy to `port` that holds every new connection `delay` ms before it forwards anything:
 * a server that is slow to connect to (far away, or on a loaded machine), and quick to answer
 * once connected.
 */
export class SlowProxy {
  static async start(port, delay) {
    const proxy = new SlowProxy();
    proxy.sockets = new Set();
    proxy.server = createServer((client) => {
      proxy.sockets.add(client);
      client.pause();
      client.on("error", () => undefined);
      setTimeout(() => {
        const upstream = connect(port, "127.0.0.1", () => {
          client.pipe(upstream);
          upstream.pipe(client);
          client.resume();
        });
        proxy.sockets.add(upstream);
        upstream.on("error", () => client.destroy());
        client.on("close", () => upstream.destroy());
        upstream.on("close", () => client.destroy());
      }, delay);
    });
    await new Promise((res) => proxy.server.listen(0, "127.0.0.1", res));
    proxy.port = proxy.server.address().port;
    return proxy;
  }

  close() {
    this.server.close();
    for (const s of this.sockets) s.destroy();
  }
}

/**
 * A TCP proxy to `port` that can lose what a real network loses, on cue:
 * - `cutReplyTo(text)`: the next connection that sends `text` (a command name) has the command
 *   delivered and its reply dropped: the connection is reset between the command and its reply
 *   (the server applied it; the client never hears so);
 * - `blackhole(text)`: the next connection that sends `text` has it delivered, then its server
 *   side closed while its client side stays open and silent (a connection that died silently);
 * - `down()` / `up()`: while down, every connection, open or new, is reset at once.
 * `cuts` and `holes` count what was done.
 */
export class CutProxy {
  static async start(port) {
    const proxy = new CutProxy();
    proxy.sockets = new Set();
    proxy.cut = null;
    proxy.hole = null;
    proxy.isDown = false;
    proxy.cuts = 0;
    proxy.holes = 0;
    proxy.server = createServer((client) => {
      client.on("error", () => undefined);
      if (proxy.isDown) {
        client.resetAndDestroy();
        return;
      }
      const pair = { client, cutNext: false, silent: false };
      const upstream = connect(port, "127.0.0.1");
      pair.upstream = upstream;
      proxy.sockets.add(pair);
      upstream.on("error", () => undefined);
      client.on("data", (d) => {
        if (pair.silent) return;
        const text = d.toString("latin1");
        if (proxy.cut && text.includes(proxy.cut)) {
          proxy.cut = null;
          pair.cutNext = true;
        }
        let hole = false;
        if (proxy.hole && text.includes(proxy.hole)) {
          proxy.hole = null;
          hole = true;
        }
        upstream.write(d);
        if (hole) {
          setTimeout(() => {
            pair.silent = true;
            proxy.holes += 1;
            upstream.destroy();
          }, 50);
        }
      });
      upstream.on("data", (d) => {
        if (pair.silent) return;
        if (pair.cutNext) {
          proxy.cuts += 1;
          pair.silent = true;
          client.resetAndDestroy();
          upstream.destroy();
          return;
        }
        client.write(d);
      });
      client.on("close", () => {
        upstream.destroy();
        proxy.sockets.delete(pair);
      });
      upstream.on("close", () => {
        if (!pair.silent || pair.cutNext) client.destroy();
      });
    });
    await new Promise((res) => proxy.server.listen(0, "127.0.0.1", res));
    proxy.port = proxy.server.address().port;
    return proxy;
  }

  cutReplyTo(text) {
    this.cut = text;
  }

  blackhole(text) {
    this.hole = text;
  }

  down() {
    this.isDown = true;
    for (const p of this.sockets) {
      p.silent = true;
      p.client.resetAndDestroy();
      p.upstream.destroy();
    }
  }

  up() {
    this.isDown = false;
  }

  close() {
    this.server.close();
    for (const p of this.sockets) {
      p.client.destroy();
      p.upstream.destroy();
    }
  }
}
