/**
 * relock for Node.js: distributed locks for ioredis on Redis with the relock module.
 *
 * ```ts
 * import Redis from "ioredis";
 * import { Relock } from "relock";
 *
 * const locks = new Relock(new Redis());
 * await locks.using("orders:42", { ttl: 30_000, wait: 5_000 }, async (hold) => {
 *   await store.write(data, { fence: hold.token, signal: hold.signal });
 * });
 * ```
 *
 * `new Relock(redis)` takes one ioredis `Redis`, a `Cluster`, or an array of `Redis`
 * (Redlock over independent masters, quorum N/2+1). Durations are milliseconds.
 */
import { Command } from "ioredis";
import type { ChainableCommander, Cluster, Redis, RedisOptions } from "ioredis";

import * as core from "./core";
import { ClientClosed, Failure, Holder, KeyStats, Leader, LeaderChange, LockInfo, LogEntry, LossReason, Round, TimeoutFailure, Waiter, Who } from "./core";
import { InvalidArgumentError, LockLostError, NotAcquiredError, RelockError, ServerError } from "./errors";

export * from "./errors";
export type { Holder, KeyStats, Leader, LeaderChange, LockInfo, LogEntry, LossReason, Waiter, Who } from "./core";
export { DEFAULT_MAX_PARTIAL_HOLD, DEFAULT_NODE_TIMEOUT, DEFAULT_REPLICA_ACK_TIMEOUT, DEFAULT_RETRY_DELAY, DEFAULT_TTL, MIN_TTL } from "./core";

/** Extra time a blocked LOCK.WAIT's reply may take beyond its own timeout (a busy server). */
const WAIT_GRACE = 1000;
/**
 * How late a server may answer a `WAIT` that timed out: Redis checks blocked clients' timeouts
 * when its event loop wakes, at least `hz` times a second (10 by default).
 */
const WAIT_LATE = 100;
/**
 * How long a client of one server waits for its connection to be ready before the first time
 * it ever was (at most; then the command has its own timeout): a process starting up does not
 * know yet how far its server is, and ioredis connects in the background.
 */
const FIRST_CONNECT = 2000;

/**
 * Over several masters, how long a call waits for the package's first connection to a master
 * whose client is connected (at most): a round is decided by a quorum without it anyway.
 */
const REDLOCK_FIRST_CONNECT = 500;

type Client = Redis | Cluster;

/** Options of a client; every one has relock-client's default. */
export interface RelockOptions {
  /** What comes before the random part of every owner. Default `<host>/<pid>`; `""` for none. */
  ownerPrefix?: string;
  /** How long one server may take to answer one command, in ms. Default 100. */
  nodeTimeout?: number;
  /** The mean pause between two Redlock rounds of a wait, in ms. Default 200. */
  retryDelay?: number;
  /** How long a Redlock wait keeps a minority of grants while it waits for a quorum (at most ttl/4), in ms. Default 500. */
  maxPartialHold?: number;
  /**
   * How many replicas of a master must acknowledge an acquisition, re-entry or renewal (`WAIT
   * replicas timeout`, sent on the same connection right after the write, to the same server)
   * before it counts; a campaign resolves only once its grant is acknowledged. When fewer do
   * within `replicaAckTimeout`, an acquisition or re-entry is taken back on that master and that master
   * counts as failed (the error names it and says how many acknowledged); a renewal does not
   * count (the hold stays valid until its previous validity ends), except on a master with
   * fewer replicas connected than asked (the promoted replica after a failover, its old
   * master down), where it counts once every connected replica acknowledged it. Applies per
   * master with Redlock and to the key's master in a cluster. It narrows, not closes, the
   * window in which a failover loses a lock: replication stays asynchronous. Default 0 (off).
   */
  replicaAcks?: number;
  /** How long a master waits for `replicaAcks` acknowledgements, in ms; it adds to the bound on every request, with 100 ms for a server that times a WAIT out late (and so to what a round takes off the validity). Default 500. */
  replicaAckTimeout?: number;
}

/** The acknowledgements a write waits for (RelockOptions.replicaAcks). */
interface Acks {
  replicas: number;
  timeout: number;
}

/**
 * A write whose replicas must acknowledge it: a grant or a re-entry (`undo`, or server i's
 * `undo(i)`, takes it back where they did not), or a renewal (`undo` absent: one not
 * acknowledged does not count).
 */
interface AckedWrite {
  undo?: ReadonlyArray<string | number> | ((i: number) => ReadonlyArray<string | number>);
}

/** How to hold a key. */
export interface LockOptions {
  /** The lease in ms, 5 (`MIN_TTL`) to 10^12, renewed every ttl/3 while held. Default 30000. */
  ttl?: number;
  /** How long to wait for the lock in ms: undefined (default) waits without limit, 0 tries once. */
  wait?: number;
  /** A shared hold (a read lock). Default false. */
  shared?: boolean;
  /** A permit of a semaphore of `limit` (implies shared; one server or a cluster only). */
  limit?: number;
  /** How many permits of the semaphore to take at once (with `limit`; 1 to the limit). Default 1. */
  permits?: number;
}

/** How to stand in an election. */
export interface CampaignOptions {
  /** The leadership's lease in ms, 5 to 10^12, renewed every ttl/3 while it leads. Default 30000. */
  ttl?: number;
  /** How long to wait to lead, in ms: undefined (default) waits without limit, 0 tries once. */
  timeout?: number;
}

/** How to observe an election. */
export interface ObserveOptions {
  /** Ends the observation (a wait in flight is cut). */
  signal?: AbortSignal;
}

/** @internal A class of hold (Hold, Leadership). */
type HoldClass<H extends Hold> = new (...args: ConstructorParameters<typeof Hold>) => H;

/** How to hold several keys together. */
export interface GroupOptions {
  /** The lease in ms, 5 (`MIN_TTL`) to 10^12, renewed every ttl/3 while held. Default 30000. */
  ttl?: number;
  /** How long to wait for all the keys in ms: undefined (default) waits without limit, 0 tries once. */
  wait?: number;
}

function isCluster(c: Client): c is Cluster {
  return (c as { isCluster?: boolean }).isCluster === true;
}

/** The longest delay `setTimeout` keeps (2^31 - 1 ms); it fires a longer one after 1 ms. */
const MAX_DELAY = 2 ** 31 - 1;

/**
 * A timer for any delay up to 10^12 ms (ttls and waits go that far): `setTimeout` in steps
 * of at most `MAX_DELAY`, each one measured again against the end.
 */
class Timer {
  private handle: NodeJS.Timeout | undefined;
  private refed = true;

  constructor(fn: () => void, ms: number) {
    const end = core.now() + Math.max(0, ms);
    const arm = (): void => {
      const left = end - core.now();
      this.handle = left > MAX_DELAY ? setTimeout(arm, MAX_DELAY) : setTimeout(fn, Math.max(0, left));
      if (!this.refed) this.handle.unref();
    };
    arm();
  }

  /** Lets the process exit while the timer is pending, as `Timeout.unref()` does. */
  unref(): this {
    this.refed = false;
    this.handle?.unref();
    return this;
  }

  clear(): void {
    if (this.handle) clearTimeout(this.handle);
  }
}

/** Resolves after `ms` (any delay: see Timer). */
function pause(ms: number): Promise<void> {
  return new Promise((resolve) => new Timer(resolve, ms));
}

function withTimeout<T>(p: Promise<T>, ms: number | null, what: string): Promise<T> {
  if (ms === null) return p;
  return new Promise<T>((resolve, reject) => {
    const timer = new Timer(() => reject(new TimeoutFailure(`no reply within ${ms} ms (${what})`)), ms);
    p.then(
      (v) => {
        timer.clear();
        resolve(v);
      },
      (e: unknown) => {
        timer.clear();
        reject(e);
      },
    );
  });
}

/**
 * Resolves once `conn` is ready, or rejects: with a TimeoutFailure after `ms` (null: no
 * limit), or at once when it ends. Nothing is queued on a connection the package owns, so a
 * command is written only once it is ready (see OWN).
 */
function untilReady(conn: Client, ms: number | null): Promise<void> {
  if (conn.status === "ready") return Promise.resolve();
  if (conn.status === "end") return Promise.reject(new Error("Connection is closed."));
  // A lazyConnect client connects on its first command; this waits before sending one.
  if (conn.status === "wait") conn.connect().catch(() => undefined);
  return new Promise<void>((resolve, reject) => {
    const off = (): void => {
      timer?.clear();
      conn.off("ready", onReady);
      conn.off("end", onEnd);
    };
    const onReady = (): void => {
      off();
      resolve();
    };
    const onEnd = (): void => {
      off();
      reject(new Error("Connection is closed."));
    };
    const timer =
      ms === null
        ? undefined
        : new Timer(() => {
            off();
            reject(new TimeoutFailure(`no connection within ${ms} ms`));
          }, ms);
    conn.on("ready", onReady);
    conn.on("end", onEnd);
  });
}

/**
 * Whether `conn`'s sockets keep the process alive: yes while a wait is in flight on it, no
 * while it sits idle (a process whose own clients quit may then exit, as without relock).
 */
function keepAlive(conn: Client, on: boolean): void {
  for (const c of isCluster(conn) ? conn.nodes() : [conn]) {
    const stream = c.stream as { ref?: () => void; unref?: () => void } | undefined;
    if (on) stream?.ref?.();
    else stream?.unref?.();
  }
}

/**
 * What the package sets on the connections it owns (duplicates of the client it was given,
 * which keep its address, login, TLS, database, protocol and name): ioredis never sends a
 * command of the package twice (`autoResendUnfulfilledCommands: false`: a LOCK.RELEASE whose
 * reply was lost must not run again), never sends one late from a queue
 * (`enableOfflineQueue: false`: a call waits for the connection itself, within its own
 * timeout), and applies no timeout of its own (the package's node timeout and wait bounds
 * do). See docs/node.md.
 */
const OWN: Partial<RedisOptions> = {
  autoResendUnfulfilledCommands: false,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: undefined,
  socketTimeout: undefined,
  lazyConnect: false,
  autoResubscribe: false,
  enableAutoPipelining: false,
  reconnectOnError: null,
};
/** How often a blocked LOCK.WAIT's connection is looked up on the server (`CLIENT LIST ID`), as relock-client does. */
const WATCH_WAIT_EVERY = 1000;
/** Checks in a row that got no answer before a waiting connection counts as dead. */
const UNANSWERED_CHECKS = 3;

/** What an idle wait connection is dropped on: its connection closing (or, for a cluster, changing). */
const DROP_IDLE_ON = ["close", "end", "+node", "-node"] as const;

/**
 * The connections the package opened for one client, shared by every Relock made on it (a
 * Relock made per request must not open a connection each: they would pile up until the
 * server refuses clients).
 */
interface Shared {
  /** The shared connection for acquisitions, renewals and releases, opened at the first call. */
  own: Client | undefined;
  /** Whether the shared connection was ever ready (see FIRST_CONNECT). */
  ownReadyOnce: boolean;
  /**
   * Connections of their own for LOCK.WAIT, which blocks its connection, kept for the next
   * wait: unref'd while idle, dropped when they close (never reconnected in the background)
   * and when the client itself ends (quit or disconnect).
   */
  idle: Client[];
  dropIdle: Map<Client, () => void>;
  /** What cuts every LOCK.WAIT in flight on this client (its end does). */
  waits: Set<() => void>;
  /** The client quit or was disconnected for good: the package's connections and waits go with it. */
  onEnd: () => void;
}
const sharedOf = new WeakMap<Client, Shared>();

/** A waiting connection that died silently (found by the `CLIENT LIST ID` check): the wait is sent again. */
class DeadWait extends Error {}

/** `CLIENT LIST ID n`'s answer: blocked there, answered (the reply is on its way or lost), gone, or unknown. */
function seenWaiting(reply: unknown): "blocked" | "answered" | "gone" | "unknown" {
  const line = (core.text(reply) ?? "").split("\n").find((l) => l.trim() !== "");
  if (line === undefined) return "gone";
  const flags = line
    .split(" ")
    .find((f) => f.startsWith("flags="))
    ?.slice("flags=".length);
  if (flags === undefined) return "unknown";
  return flags.includes("b") ? "blocked" : "answered";
}

const wire = (a: string | number | Buffer): string | Buffer => (Buffer.isBuffer(a) ? a : String(a));

/**
 * `args` as an ioredis command; on a cluster, a relock command carries its key's slot
 * (core.routingKey), so that it goes to the master the client's map names for it, and after a
 * MOVED to the new one, not to a master of ioredis's choice. A command in flight on a master
 * that a refresh of the map then drops ends with "Connection is closed": for a fenced write,
 * "it may have run".
 */
function command(conn: Client, args: ReadonlyArray<string | number | Buffer>): Command {
  const [cmd, ...rest] = args;
  const c = new Command(String(cmd), rest.map(wire), { replyEncoding: "utf8" });
  const key = isCluster(conn) ? core.routingKey(args) : null;
  if (key !== null) Object.assign(c, { keys: [key], slot: core.keySlot(key) }); // what ioredis routes by
  return c;
}

/**
 * `args` (a write) and `WAIT replicas timeout` in one pipeline on `conn`: both reach the same
 * server (in a cluster, the write's slot decides where the pipeline goes; WAIT has no key of
 * its own), one after the other, so that the count covers the write. The write's reply (its
 * error thrown) and how many replicas acknowledged; a WAIT that answers an error (an ACL that
 * allows LOCK.* but not WAIT) counts as none, its error third: the write ran, and is taken back
 * or not counted as any other one not acknowledged. Sent once, as every command of the
 * package's connections (see OWN); in a cluster, one MOVED or ASK (a refusal that proves the
 * write did not run there) is followed to the master it names, as ioredis follows it for a
 * single command (it does not for this pipeline: WAIT answers there).
 */
async function sendAcked(conn: Client, args: ReadonlyArray<string | number | Buffer>, acks: Acks): Promise<[unknown, number, Error?]> {
  try {
    return await sendAckedOn(conn, command(conn, args), acks, false);
  } catch (e) {
    const moved = e instanceof Error && isCluster(conn) ? /^(MOVED|ASK) \d+ (\S+)$/.exec(e.message) : null;
    if (!moved || !isCluster(conn)) throw e;
    // The next try goes to the master the refreshed map names.
    if (moved[1] === "MOVED") conn.refreshSlotsCache();
    const node = conn.nodes("master").find((n) => `${n.options.host}:${n.options.port}` === moved[2]);
    if (!node) throw e;
    return sendAckedOn(node, command(node, args), acks, moved[1] === "ASK");
  }
}

async function sendAckedOn(conn: Client, write: Command, acks: Acks, asking: boolean): Promise<[unknown, number, Error?]> {
  const pipe = conn.pipeline() as ChainableCommander & { sendCommand(c: Command): unknown };
  if (asking) pipe.sendCommand(new Command("ASKING", [], { replyEncoding: "utf8" }));
  pipe.sendCommand(write);
  // WAIT 0 would wait forever.
  pipe.sendCommand(new Command("WAIT", [String(acks.replicas), String(Math.max(1, Math.ceil(acks.timeout)))], { replyEncoding: "utf8" }));
  const replies = (await pipe.exec()) ?? [];
  if (asking) {
    const [askError] = replies.shift() ?? [null];
    if (askError) throw askError;
  }
  const [[writeError, reply] = [null, null], [waitError, acked] = [null, null]] = replies;
  if (writeError) throw writeError;
  if (waitError) return [reply, 0, waitError];
  return [reply, Number(acked)];
}

/** Sends `args` on `conn` (see command). */
function send(conn: Client, args: ReadonlyArray<string | number | Buffer>): Promise<unknown> {
  return conn.sendCommand(command(conn, args)) as Promise<unknown>;
}

/**
 * One master: a client for one server, or a Redis Cluster acting as one. Every command of the
 * package goes on connections it owns (see OWN): one shared connection for acquisitions,
 * renewals and releases (the client's own connection may be blocked by the application, or
 * re-send what it never got an answer to), and one per blocked LOCK.WAIT.
 */
class Server {
  readonly name: string;
  readonly cluster: boolean;
  /** The connections the package opened for this client, shared by every Relock made on it. */
  private readonly s: Shared;
  /** What cuts each LOCK.WAIT in flight of this Relock (its close() does). */
  private readonly waits = new Set<() => void>();
  /** Whether a renewal was counted here with fewer replicas connected than asked (said once). */
  warnedFewReplicas = false;

  constructor(
    readonly client: Client,
    /** Whether calls wait for a first connection (a client of one server, whose answer is the only one). */
    private readonly firstGrace: boolean,
    /** How long one check of a waiting connection may take. */
    private readonly nodeTimeout: number,
  ) {
    this.cluster = isCluster(client);
    let shared = sharedOf.get(client);
    if (!shared) {
      const made: Shared = {
        own: undefined,
        ownReadyOnce: false,
        idle: [],
        dropIdle: new Map(),
        waits: new Set(),
        onEnd: () => {
          // The application quit its client (how a Node process ends with ioredis): the holds
          // made on it are ended (their holders told first) and released on the package's
          // connection, still open, before it closes; nothing is left held until the ttl.
          for (const stop of [...made.waits]) stop();
          void endHolds(client).finally(() => this.closeAll(made.waits));
        },
      };
      shared = made;
      sharedOf.set(client, shared);
    }
    this.s = shared;
    if (isCluster(client)) {
      const nodes = client.nodes("master").map((n) => `${n.options.host}:${n.options.port}`);
      this.name = `cluster[${nodes.slice(0, 3).join(",")}]`;
    } else {
      const o = client.options;
      this.name = o.path ? o.path : `${o.host?.includes(":") ? `[${o.host}]` : o.host}:${o.port}`;
    }
  }

  /** A new connection of the package's (`wait`: for one LOCK.WAIT, never reconnected). */
  private open(wait: boolean): Client {
    let conn: Client;
    if (isCluster(this.client)) {
      // A cluster follows MOVED and ASK itself (the command did not run there); it must not
      // re-send a command whose connection closed.
      conn = this.client.duplicate([], {
        retryDelayOnFailover: 0,
        lazyConnect: false,
        redisOptions: { ...this.client.options.redisOptions, autoResendUnfulfilledCommands: false, commandTimeout: undefined, socketTimeout: undefined },
      });
    } else {
      // Never reconnected in the background (no timer keeps a process alive, nothing is sent
      // late): the next call opens a new one.
      conn = this.client.duplicate({ ...OWN, retryStrategy: () => null });
    }
    conn.on("error", () => undefined); // each call sees its own failure
    if (!wait) {
      // The shared connection never keeps a process alive by itself (a call in flight has a
      // timer that does).
      conn.on("ready", () => keepAlive(conn, false));
      if (isCluster(conn)) conn.on("+node", (n: Redis) => n.on("ready", () => (n.stream as { unref?: () => void } | undefined)?.unref?.()));
    }
    return conn;
  }

  /** The package's shared connection, opened when needed (again after it ended). */
  conn(): Client {
    if (this.s.own && this.s.own.status !== "end") return this.s.own;
    this.checkOpen();
    const own = this.open(false);
    let up = false;
    own.once("ready", () => {
      this.s.ownReadyOnce = true;
      up = true;
    });
    // A connection that was up and dropped is opened again at once (not in a loop: one that
    // never got ready is opened again by the next call), so that the next renewal finds it.
    own.once("end", () => {
      if (this.s.own === own && up && this.client.status !== "end") this.conn();
    });
    this.s.own = own;
    this.watchEnd();
    return own;
  }

  /** Throws ClientClosed (permanent) when the client given to Relock has ended. */
  private checkOpen(): void {
    if (this.client.status === "end") {
      throw new ClientClosed("the client given to Relock was closed (quit(), disconnect(), or its retryStrategy gave up): connect it again");
    }
  }

  /**
   * Waits for the shared connection: `timeout`; the first time, FIRST_CONNECT for a client of
   * one server, and REDLOCK_FIRST_CONNECT over several masters when the client's own connection
   * is up (the package's is then only slower to open, on a loaded machine).
   */
  private async ready(conn: Client, timeout: number | null): Promise<void> {
    if (conn.status === "ready") return;
    let ms = timeout;
    if (ms !== null && !this.s.ownReadyOnce && this.firstGrace) ms = Math.max(ms, FIRST_CONNECT);
    else if (ms !== null && !this.s.ownReadyOnce && this.client.status === "ready") ms = Math.max(ms, REDLOCK_FIRST_CONNECT);
    try {
      await untilReady(conn, ms);
    } catch (e) {
      this.checkOpen(); // closed because the client ended: say so
      throw e;
    }
  }

  async call(args: ReadonlyArray<string | number | Buffer>, timeout: number | null): Promise<unknown> {
    const conn = this.conn();
    await this.ready(conn, timeout);
    const p = send(conn, args);
    p.catch(() => undefined); // a late failure after a timeout is nobody's business
    return withTimeout(p, timeout, String(args[0]));
  }

  /**
   * `args` followed by `WAIT` (see sendAcked), on a connection of its own from the pool the
   * blocking calls use, never on the shared one: the server blocks a connection during WAIT,
   * and every other command there (other holds' renewals, releases) would queue behind it,
   * the k-th of k acked writes then taking k times the ack latency. The connection goes back
   * to the pool once both replies came; one whose pipeline did not answer in time is closed
   * (it re-sends nothing: see `open`). The reply and how many replicas acknowledged.
   */
  async callAcked(args: ReadonlyArray<string | number>, acks: Acks, timeout: number): Promise<[unknown, number, Error?]> {
    this.checkOpen();
    const conn: Client = this.takeIdle() ?? this.open(true);
    let answered = false;
    try {
      await this.ready(conn, timeout);
      const p = sendAcked(conn, args, acks);
      p.then(
        () => (answered = true),
        (e: unknown) => (answered = e instanceof Error && e.name === "ReplyError"),
      );
      return await withTimeout(p, timeout, String(args[0]));
    } finally {
      if (answered) this.putIdle(conn);
      else conn.disconnect();
    }
  }

  /**
   * How many replicas the master of `args`'s key has connected now (`ROLE`, sent where
   * `args` goes). Rejects when the server that answers is not a master (any more).
   */
  async connectedReplicas(args: ReadonlyArray<string | number>, timeout: number): Promise<number> {
    const conn = this.conn();
    await this.ready(conn, timeout);
    const role = new Command("ROLE", [], { replyEncoding: "utf8" });
    const key = isCluster(conn) ? core.routingKey(args) : null;
    if (key !== null) Object.assign(role, { slot: core.keySlot(key) });
    const p = conn.sendCommand(role) as Promise<unknown>;
    p.catch(() => undefined);
    const reply = await withTimeout(p, timeout, "ROLE");
    if (!Array.isArray(reply) || core.text(reply[0]) !== "master") throw new core.BadReply(`ROLE: not a master (${JSON.stringify(reply)})`);
    return Array.isArray(reply[2]) ? reply[2].length : 0;
  }

  /** The master that serves `args`'s key: this server, or in a cluster the one the client's map names (`host:port`). */
  masterOf(args: ReadonlyArray<string | number>): string {
    const key = core.routingKey(args);
    if (!isCluster(this.client) || key === null) return this.name;
    const conn = this.s.own && isCluster(this.s.own) ? this.s.own : this.client;
    return conn.slots[core.keySlot(key)]?.[0] ?? this.name;
  }

  /**
   * `args` (a LOCK.FENCED, or a LOCK.FORCERELEASE: a command not safe to run twice) sent at
   * most once, on the package's shared connection: ioredis re-sends nothing there (see OWN, and
   * `open` for a cluster, which follows MOVED, ASK, TRYAGAIN and CLUSTERDOWN, refusals that say
   * the command did not run). Once it may have been written, no reply in time or a connection
   * that ended first rejects with `core.Unanswered`.
   */
  async callOnce(args: ReadonlyArray<string | number | Buffer>, timeout: number): Promise<unknown> {
    const conn = this.conn();
    await this.ready(conn, timeout); // nothing is sent before the connection is up
    const p = send(conn, args);
    p.catch(() => undefined);
    try {
      return await withTimeout(p, timeout, String(args[0]));
    } catch (e) {
      throw core.unanswered(e) ?? e;
    }
  }

  /**
   * A blocking call on a connection of its own; `cancel` gets a function that cuts it short.
   * While it waits, the server is asked every second over the shared connection whether the
   * waiting connection is still blocked there (`CLIENT LIST ID`, as relock-client does): one
   * the server no longer knows, one it answered without the answer arriving, or no answer to
   * 3 checks in a row, died silently; the same command (same owner: a grant the dead
   * connection never delivered is answered again at once) is sent on a new connection.
   */
  async blocking(args: ReadonlyArray<string | number>, timeout: number | null, cancel: Array<() => void>): Promise<unknown>;
  /**
   * With `acks`, `WAIT` goes right behind the blocking command, in one pipeline on its
   * connection: the server runs it once the command is answered (a grant's acknowledgement,
   * counted before anything else is sent there). The reply and how many replicas acknowledged.
   */
  async blocking(args: ReadonlyArray<string | number>, timeout: number | null, cancel: Array<() => void>, acks: Acks): Promise<[unknown, number, Error?]>;
  async blocking(args: ReadonlyArray<string | number>, timeout: number | null, cancel: Array<() => void>, acks?: Acks): Promise<unknown> {
    this.checkOpen();
    const end = timeout === null ? null : core.now() + timeout;
    let cut = false;
    let current: Client | undefined;
    const stop = (): void => {
      cut = true;
      current?.disconnect();
    };
    cancel.push(stop);
    // close() cuts the waits in flight (their acquisitions then end: see Relock.close()).
    this.waits.add(stop);
    this.s.waits.add(stop);
    try {
      return await this.blockingOn(args, end, () => cut, (c) => (current = c), acks);
    } finally {
      this.waits.delete(stop);
      this.s.waits.delete(stop);
    }
  }

  private async blockingOn(
    args: ReadonlyArray<string | number>,
    end: number | null,
    isCut: () => boolean,
    setCurrent: (c: Client) => void,
    acks: Acks | undefined,
  ): Promise<unknown> {
    for (;;) {
      const cut = isCut();
      const left = end === null ? null : Math.max(0, end - core.now());
      const conn: Client = this.takeIdle() ?? this.open(true);
      setCurrent(conn);
      if (cut) conn.disconnect();
      let watch: { stop: () => void; dead: Promise<never> } | undefined;
      try {
        await untilReady(conn, left === null ? FIRST_CONNECT : Math.min(left, FIRST_CONNECT));
        const id = this.cluster ? null : conn.call("CLIENT", "ID");
        id?.catch(() => undefined);
        const p = acks ? sendAcked(conn, args, acks) : send(conn, args);
        p.catch(() => undefined);
        if (id) watch = this.watch(id);
        const reply = await withTimeout(watch ? Promise.race([p, watch.dead]) : p, left, String(args[0]));
        watch?.stop();
        if (!isCut()) this.putIdle(conn);
        else conn.disconnect();
        return reply;
      } catch (e) {
        watch?.stop();
        conn.disconnect();
        if (!(e instanceof DeadWait) || isCut()) throw e;
        this.checkOpen();
        // Sent again at once, on a new connection.
      }
    }
  }

  /** Watches a waiting connection whose id `id` gives; `dead` rejects with DeadWait when it died silently. */
  private watch(id: Promise<unknown>): { stop: () => void; dead: Promise<never> } {
    let stopped = false;
    let timer: Timer | undefined;
    const dead = new Promise<never>((_, reject) => {
      let answered = 0;
      let unanswered = 0;
      const check = async (): Promise<void> => {
        if (stopped) return;
        let seen: ReturnType<typeof seenWaiting>;
        try {
          const client = await withTimeout(id, this.nodeTimeout, "CLIENT ID");
          seen = seenWaiting(await this.call(["CLIENT", "LIST", "ID", String(client)], Math.max(this.nodeTimeout, WATCH_WAIT_EVERY)));
        } catch (e) {
          if (e instanceof Error && e.name === "ReplyError") return; // CLIENT forbidden (NOPERM): no check
          seen = "unknown";
        }
        if (stopped) return;
        if (seen === "blocked") [answered, unanswered] = [0, 0];
        else if (seen === "gone") answered = 2;
        else if (seen === "answered") answered += 1;
        else [answered, unanswered] = [0, unanswered + 1];
        if (answered >= 2 || unanswered >= UNANSWERED_CHECKS) {
          reject(new DeadWait("the waiting connection died silently (the server no longer has it blocked)"));
          return;
        }
        timer = new Timer(() => void check(), answered > 0 ? this.nodeTimeout : WATCH_WAIT_EVERY).unref();
      };
      timer = new Timer(() => void check(), WATCH_WAIT_EVERY).unref();
    });
    dead.catch(() => undefined);
    return {
      dead,
      stop: () => {
        stopped = true;
        timer?.clear();
      },
    };
  }

  /** Several commands in one round trip (a pipeline): each reply, or the error in its place. */
  async callMany(commands: ReadonlyArray<ReadonlyArray<string | number>>, timeout: number): Promise<unknown[]> {
    const conn = this.conn();
    await this.ready(conn, timeout);
    const pipe = conn.pipeline();
    for (const args of commands) (pipe as ChainableCommander & { sendCommand(c: Command): unknown }).sendCommand(command(conn, args));
    const p = pipe.exec();
    p.catch(() => undefined);
    const out = (await withTimeout(p, timeout, "pipeline")) ?? [];
    return out.map(([err, reply]) => err ?? reply);
  }

  /** A command without a key on every master: each cluster primary, or the one server. */
  async callNodes(args: ReadonlyArray<string | number>, timeout: number): Promise<Array<[string, unknown]>> {
    if (!isCluster(this.client)) return [[this.name, await this.call(args, timeout)]];
    const [cmd, ...rest] = args;
    return Promise.all(
      this.client.nodes("master").map(async (n): Promise<[string, unknown]> => {
        const p = n.call(String(cmd), ...rest.map(wire));
        p.catch(() => undefined);
        return [`${n.options.host}:${n.options.port}`, await withTimeout(p, timeout, String(cmd))];
      }),
    );
  }

  /** Whether the package can send on this server now: its client is open (the package's own connection is opened again when needed). */
  connected(): boolean {
    return this.client.status === "ready";
  }

  private takeIdle(): Client | undefined {
    const conn = this.s.idle.pop();
    if (!conn) return undefined;
    this.forget(conn);
    keepAlive(conn, true);
    return conn;
  }

  /** Listens for the client's end only while the package has connections to close. */
  private watchEnd(): void {
    const listening = this.client.listeners("end").includes(this.s.onEnd);
    const want = this.s.idle.length > 0 || this.s.own !== undefined;
    if (want && !listening) this.client.on("end", this.s.onEnd);
    else if (!want && listening) this.client.off("end", this.s.onEnd);
  }

  private putIdle(conn: Client): void {
    if (this.s.idle.length >= 16 || conn.status !== "ready") {
      conn.disconnect();
      return;
    }
    keepAlive(conn, false);
    const drop = (): void => {
      this.forget(conn);
      conn.disconnect();
    };
    for (const e of DROP_IDLE_ON) conn.on(e, drop);
    this.s.dropIdle.set(conn, drop);
    this.s.idle.push(conn);
    this.watchEnd();
  }

  private forget(conn: Client): void {
    const drop = this.s.dropIdle.get(conn);
    if (drop) {
      for (const e of DROP_IDLE_ON) conn.off(e, drop);
      this.s.dropIdle.delete(conn);
    }
    this.s.idle = this.s.idle.filter((c) => c !== conn);
    this.watchEnd();
  }

  /** Closes the package's connections (opened again by the next call, while the client lives). */
  close(): void {
    this.closeAll(this.waits);
  }

  /**
   * Cuts the waits in `waits`, and closes the connections opened for the client (shared by
   * every Relock on it: the others' next calls open them again).
   */
  private closeAll(waits: Set<() => void>): void {
    for (const stop of [...waits]) stop();
    for (const c of [...this.s.idle]) {
      this.forget(c);
      c.disconnect();
    }
    const own = this.s.own;
    this.s.own = undefined;
    own?.disconnect();
    this.watchEnd();
  }
}
const abortedOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, "aborted")?.get;
const reasonOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, "reason")?.get;
const throwIfAbortedOf = AbortSignal.prototype.throwIfAborted;

/**
 * Makes `signal.aborted`, `signal.reason` and `signal.throwIfAborted()` call `poll` first (a
 * hold's clock check), on this signal alone: I/O reads them synchronously, and after the event
 * loop was blocked past the validity no timer has run yet to abort the signal.
 */
function readsTheClock(signal: AbortSignal, poll: () => void): void {
  if (!abortedOf || !reasonOf) return;
  Object.defineProperties(signal, {
    aborted: {
      configurable: true,
      get: (): boolean => {
        poll();
        return abortedOf.call(signal) as boolean;
      },
    },
    reason: {
      configurable: true,
      get: (): unknown => {
        poll();
        return reasonOf.call(signal);
      },
    },
    throwIfAborted: {
      configurable: true,
      writable: true,
      value: (): void => {
        poll();
        throwIfAbortedOf.call(signal);
      },
    },
  });
}

const live = new Set<Hold>();

/** Ends and releases the holds of every Relock made on `client`, which has ended. */
async function endHolds(client: Client): Promise<void> {
  const mine = [...live].filter((h) => h.client.uses(client));
  for (const h of mine) h.end("the client given to Relock was closed (quit() or disconnect()), which released it");
  await Promise.all(mine.map((h) => h.release().catch(() => false)));
}
let exitHook = false;

function watchExit(): void {
  if (exitHook) return;
  exitHook = true;
  // The loop is about to go idle with holds still held: release them (a process that is
  // killed or calls process.exit() cannot; their leases end with their ttl).
  process.on("beforeExit", () => {
    for (const h of [...live]) {
      if (!h.client.connected()) continue;
      h.end("the process is exiting (the event loop went idle) and released it");
      void h.release().catch(() => undefined);
    }
  });
}

/**
 * Locks on one Redis server with the relock module, on a Redis Cluster, or with Redlock over
 * an array of independent masters. Every hold has an owner of its own, so concurrent tasks
 * sharing one `Relock` exclude each other.
 */
export class Relock {
  /** The servers, as `host:port` (a cluster: `cluster[...]`). */
  readonly servers: string[];
  readonly nodeTimeout: number;
  readonly retryDelay: number;
  readonly maxPartialHold: number;
  /** How many replicas must acknowledge each acquisition, re-entry and renewal (0: off). */
  readonly replicaAcks: number;
  /** How long a master waits for them, in ms. */
  readonly replicaAckTimeout: number;
  private readonly nodes: Server[];
  private readonly prefix: string | undefined;
  private readonly background = new Set<Promise<unknown>>();
  /** How many times close() ran: an acquisition that started before one ends (see closedDuring). */
  private closes = 0;

  constructor(client: Client | Client[], options: RelockOptions = {}) {
    const clients = Array.isArray(client) ? client : [client];
    if (clients.length === 0) throw new InvalidArgumentError("no servers given");
    if (clients.length > 1 && clients.some(isCluster)) {
      throw new InvalidArgumentError("Redlock takes independent masters; pass a Cluster alone");
    }
    this.nodeTimeout = options.nodeTimeout ?? core.DEFAULT_NODE_TIMEOUT;
    if (typeof this.nodeTimeout !== "number" || !(this.nodeTimeout >= 1)) throw new InvalidArgumentError(`nodeTimeout ${this.nodeTimeout} is below 1 ms`);
    this.replicaAcks = options.replicaAcks ?? 0;
    this.replicaAckTimeout = options.replicaAckTimeout ?? core.DEFAULT_REPLICA_ACK_TIMEOUT;
    if (!Number.isInteger(this.replicaAcks) || this.replicaAcks < 0) throw new InvalidArgumentError(`replicaAcks ${this.replicaAcks} is not a whole number of replicas`);
    if (typeof this.replicaAckTimeout !== "number" || !(this.replicaAckTimeout >= 1) || this.replicaAckTimeout > core.MAX_MS) {
      throw new InvalidArgumentError(`replicaAckTimeout ${this.replicaAckTimeout} is not 1 to 10^12 ms`);
    }
    this.nodes = clients.map((c) => new Server(c, clients.length === 1, this.writeTimeout));
    this.servers = this.nodes.map((n) => n.name);
    // Redlock waits for no master longer than nodeTimeout, a first connection included: the
    // package's own connections get a head start.
    if (this.nodes.length > 1) for (const n of this.nodes) if (n.client.status !== "wait") n.conn();
    this.servers.forEach((name, i) => {
      if (this.servers.indexOf(name) !== i) {
        throw new InvalidArgumentError(`${name} is named twice: Redlock needs independent masters`);
      }
    });
    this.prefix = options.ownerPrefix;
    this.retryDelay = options.retryDelay ?? core.DEFAULT_RETRY_DELAY;
    this.maxPartialHold = options.maxPartialHold ?? core.DEFAULT_MAX_PARTIAL_HOLD;
    // NaN or a negative delay would make every pause 0 ms: a wait over Redlock or a group
    // would hammer the servers in a tight loop.
    for (const [name, v] of [["retryDelay", this.retryDelay], ["maxPartialHold", this.maxPartialHold]] as const) {
      if (typeof v !== "number" || !(v >= 0) || v > core.MAX_MS) throw new InvalidArgumentError(`${name} ${v} is not 0 to 10^12 ms`);
    }
    if (this.prefix !== undefined && typeof this.prefix !== "string") throw new InvalidArgumentError("ownerPrefix must be a string");
  }

  /** The acknowledgements each acquisition and renewal waits for, or undefined when off. */
  private get acks(): Acks | undefined {
    return this.replicaAcks > 0 ? { replicas: this.replicaAcks, timeout: this.replicaAckTimeout } : undefined;
  }

  /**
   * @internal The bound on one request: the node timeout, plus the replica-ack timeout when
   * acknowledgements are on (a write waits for them, on a connection of its own: see
   * Server.callAcked).
   */
  get writeTimeout(): number {
    return this.nodeTimeout + (this.replicaAcks > 0 ? this.replicaAckTimeout + WAIT_LATE : 0);
  }

  /** @internal Whether `client` is one of this Relock's. */
  uses(client: Client): boolean {
    return this.nodes.some((n) => n.client === client);
  }

  /** @internal Whether every server's connection is open (nothing is sent on a closed one at exit). */
  connected(): boolean {
    return this.nodes.every((n) => n.connected());
  }

  /** How many servers must agree: N/2 + 1. */
  get quorum(): number {
    return core.quorum(this.nodes.length);
  }

  /** A fresh owner, `<prefix>/<random>`. */
  newOwner(): string {
    return core.makeOwner(this.prefix);
  }

  /**
   * Runs `fn` while holding `key`: acquires it (waiting up to `wait` ms; undefined: no
   * limit; 0: try once; else throws `NotAcquiredError`), renews it every ttl/3, aborts
   * `hold.signal` the moment it is lost (at the latest a little before its validity ends),
   * and releases it however `fn` ends. Returns what `fn` returns.
   */
  async using<T>(key: string, options: LockOptions, fn: (hold: Hold) => Promise<T> | T): Promise<T>;
  async using<T>(key: string, fn: (hold: Hold) => Promise<T> | T): Promise<T>;
  async using<T>(
    key: string,
    a: LockOptions | ((hold: Hold) => Promise<T> | T),
    b?: (hold: Hold) => Promise<T> | T,
  ): Promise<T> {
    const [options, fn] = typeof a === "function" ? [{}, a] : [a, b];
    if (!fn) throw new InvalidArgumentError("using(key, options, fn) needs a function");
    const hold = await this.acquireOrThrow(key, options);
    try {
      return await fn(hold);
    } finally {
      await hold.release().catch(() => false);
    }
  }

  /** Acquires `key` like `using`, without a scope: the `Hold`, or null when not granted in time. */
  async acquire(key: string, options: LockOptions = {}): Promise<Hold | null> {
    try {
      return await this.acquireOrThrow(key, options);
    } catch (e) {
      if (e instanceof NotAcquiredError) return null;
      throw e;
    }
  }

  /** Like `acquire`, throwing `NotAcquiredError` (which says why) instead of returning null. */
  async acquireOrThrow(key: string, options: LockOptions = {}): Promise<Hold> {
    return this.acquireWith(key, options, () => this.newOwner(), Hold);
  }

  /** The acquisition: a new owner from `ownerOf` at each attempt, the hold made by `make`. */
  private async acquireWith<H extends Hold>(key: string, options: LockOptions, ownerOf: () => string, make: HoldClass<H>): Promise<H> {
    key = core.checkKey(key);
    const ttl = core.checkTtl(options.ttl ?? core.DEFAULT_TTL);
    const wait = core.checkWait(options.wait);
    core.checkMode(options.limit, this.nodes[0]?.cluster ? 1 : this.nodes.length, options.permits);
    const mode = core.modeArgs(options.shared ?? false, options.limit, options.permits);
    const deadline = wait === null ? null : core.now() + wait;
    const epoch = this.closes;
    for (;;) {
      let owner = ownerOf();
      const remaining = deadline === null ? null : Math.max(0, deadline - core.now());
      // One server: try on the shared connection first (a free lock costs one round trip
      // and no connection of its own); LOCK.WAIT then queues, first in, first out.
      const grant: AckedWrite = { undo: ["LOCK.RELEASE", key, owner, "FROM", 1] };
      let rnd = await this.round(["LOCK.ACQUIRE", key, owner, ttl, ...mode], { skipIf: remaining !== 0 && this.nodes.length > 1, write: grant });
      if (!rnd.won() && remaining !== 0 && !rnd.permanentlyFailed()) {
        if (rnd.failures.some(([, f]) => f.unacked && !f.undone)) {
          // A grant not acknowledged whose undo got no answer: that undo (or the give-back
          // repeating it) may still land and would take the same owner's next grant. The
          // wait goes on under a new owner, the first one given back.
          await this.releaseFailed(key, owner, ttl, rnd);
          owner = ownerOf();
        }
        rnd = await this.waitRound(key, owner, ttl, remaining, mode);
      }
      let until = rnd.validUntil(ttl);
      if (rnd.grantedLate(ttl)) {
        // Granted after a long wait: the ttl counts from a grant we did not see.
        const renewal = await this.round(["LOCK.RENEW", key, owner, ttl], { write: {} });
        until = renewal.validUntil(ttl);
        if (until === null) rnd = renewal;
      }
      if (this.closes !== epoch) {
        // close() ran meanwhile (it cut the wait): nothing is granted after it.
        await this.releaseFailed(key, owner, ttl, rnd);
        throw this.closedDuring(key);
      }
      if (until !== null) {
        const tokens: Record<string, number> = {};
        for (const [i, t] of [...rnd.agreed.entries()].sort((x, y) => x[0] - y[0])) tokens[this.servers[i] ?? ""] = Number(t);
        return new make(this, key, owner, ttl, tokens, until, mode);
      }
      await this.releaseFailed(key, owner, ttl, rnd);
      const failure = rnd.afterFailed(key, ttl, wait, deadline !== null && core.now() >= deadline, remaining !== null);
      if (failure) throw failure;
      let delay = core.jitter(this.retryDelay);
      if (deadline !== null) delay = Math.min(delay, Math.max(0, deadline - core.now()));
      await pause(delay);
    }
  }

  /** The error of an acquisition that close() ended: not retryable (the application is shutting the client down). */
  private closedDuring(key: string): RelockError {
    return new RelockError(`lock ${JSON.stringify(key)}: the client was closed (Relock.close()) during the acquisition; nothing is held`, { key, retryable: false });
  }

  // --- rounds -----------------------------------------------------------------------------

  private async ask(
    i: number,
    args: ReadonlyArray<string | number>,
    timeout: number | null,
    cancel?: Array<() => void>,
    accept?: (reply: unknown) => unknown,
    write?: AckedWrite,
  ): Promise<[unknown, Failure | undefined]> {
    const node = this.nodes[i];
    if (!node) return [null, { message: `no server number ${i}` }];
    const acks = write && this.acks;
    try {
      if (acks) {
        const [reply, acked, waitError] = cancel ? await node.blocking(args, timeout, cancel, acks) : await node.callAcked(args, acks, timeout ?? this.writeTimeout);
        const value = accept ? accept(reply) : reply;
        if (value === null || value === undefined || (acked >= acks.replicas && !waitError)) return [value, undefined];
        return await this.unacknowledged(node, i, args, value, acked, acks, write, waitError);
      }
      const reply = cancel ? await node.blocking(args, timeout, cancel) : await node.call(args, timeout);
      return [accept ? accept(reply) : reply, undefined];
    } catch (e) {
      return [null, core.classify(e, node.cluster)];
    }
  }

  /**
   * A write that fewer replicas than `replicaAcks` acknowledged: a grant is taken back on that
   * master at once (a failover could lose it) and the master counts as failed; a renewal does
   * not count, except on a master with fewer replicas connected than asked (the promoted
   * replica after a failover, its old master down), where it counts once every connected
   * replica acknowledged it: that master has the only copy of the lock anyway, and refusing
   * would give up a lock acknowledged when granted for want of a replica that is gone.
   */
  private async unacknowledged(
    node: Server,
    i: number,
    args: ReadonlyArray<string | number>,
    value: unknown,
    acked: number,
    acks: Acks,
    write: AckedWrite,
    waitError?: Error,
  ): Promise<[unknown, Failure | undefined]> {
    let undone = false;
    if (write.undo) {
      // A grant that stays (no answer) is released again in the background with the round's
      // other failures (see Round.giveBack); one taken back (answered) is not, and only then
      // may the same owner ask again (see acquireWith).
      undone = await node.call(typeof write.undo === "function" ? write.undo(i) : write.undo, this.writeTimeout).then(
        () => true,
        () => false,
      );
    } else if (!waitError) {
      const connected = await node.connectedReplicas(args, this.writeTimeout).catch(() => null);
      if (connected !== null && connected < acks.replicas && acked >= connected) {
        if (!node.warnedFewReplicas) {
          node.warnedFewReplicas = true;
          process.emitWarning(
            `relock: ${node.masterOf(args)} has ${connected} connected replica(s), fewer than replicaAcks ${acks.replicas}: ` +
              "renewals there count once every connected replica acknowledged them",
            "RelockWarning",
          );
        }
        return [value, undefined];
      }
    }
    const where = node.cluster ? `master ${node.masterOf(args)}: ` : "";
    const what = write.undo ? "; released again there" : "; the renewal does not count";
    const why = waitError ? ` (WAIT refused: ${waitError.message})` : "";
    return [null, { message: `${where}only ${acked} of ${acks.replicas} required replica acknowledgements within ${acks.timeout} ms${why}${what}`, unacked: true, undone }];
  }

  /** @internal `args` on every server (those `targets` selects), until a quorum is won or lost. */
  async round(
    args: ReadonlyArray<string | number>,
    opts: {
      targets?: boolean[];
      untilAll?: boolean;
      timeout?: number | null;
      partialHold?: number;
      blocking?: boolean;
      skipIf?: boolean;
      /** Each server's own command, in place of `args` (a hold count that differs between servers). */
      argsOf?: (i: number) => ReadonlyArray<string | number>;
      /** Turns a reply into the value agreed (null: refused). */
      accept?: (reply: unknown) => unknown;
      /** A grant or renewal that waits for the replicas' acknowledgements (`replicaAcks`). */
      write?: AckedWrite;
    } = {},
  ): Promise<Round<unknown>> {
    const rnd = new Round<unknown>(this.servers, core.now(), opts.untilAll ?? false);
    if (opts.skipIf) return rnd;
    const timeout = opts.timeout === undefined ? this.writeTimeout : opts.timeout;
    if (this.nodes.length === 1 && !opts.blocking) {
      if (opts.targets && !opts.targets[0]) rnd.onReply(0, null);
      else {
        const [v, f] = await this.ask(0, opts.argsOf ? opts.argsOf(0) : args, timeout, undefined, opts.accept, opts.write);
        rnd.onReply(0, v, f);
      }
      return rnd.finish(core.now());
    }
    const cancels: Array<Array<() => void>> = this.nodes.map(() => []);
    await new Promise<void>((resolve) => {
      let open = 0;
      let cut: Timer | undefined;
      const done = (): void => {
        cut?.clear();
        resolve();
      };
      this.nodes.forEach((_, i) => {
        if (opts.targets && !opts.targets[i]) {
          rnd.onReply(i, null);
          return;
        }
        open += 1;
        void this.ask(i, opts.argsOf ? opts.argsOf(i) : args, timeout, opts.blocking ? cancels[i] : undefined, opts.accept, opts.write).then(([v, f]) => {
          open -= 1;
          if (rnd.onReply(i, v, f) !== "pending" || open === 0) done();
          else if (opts.partialHold !== undefined && rnd.agreed.size > 0 && !cut) cut = new Timer(done, opts.partialHold);
        });
      });
      if (open === 0 || rnd.progress() !== "pending") done();
    });
    if (opts.blocking) {
      this.nodes.forEach((_, i) => {
        if (!rnd.answered.has(i)) {
          for (const c of cancels[i] ?? []) c();
          if (rnd.progress() === "pending") rnd.onReply(i, null, { message: "no quorum within the partial-hold limit", timeout: true });
        }
      });
    }
    return rnd.finish(core.now());
  }

  private async waitRound(key: string, owner: string, ttl: number, remaining: number | null, mode: string[]): Promise<Round<unknown>> {
    const args = ["LOCK.WAIT", key, owner, ttl, core.waitMs(remaining), ...mode];
    const bound = remaining === null ? null : remaining + WAIT_GRACE + this.writeTimeout;
    const grant: AckedWrite = { undo: ["LOCK.RELEASE", key, owner, "FROM", 1] };
    const rnd = await this.round(args, {
      timeout: bound,
      blocking: true,
      write: grant,
      partialHold: this.nodes.length > 1 ? Math.min(this.maxPartialHold, ttl / 4) : undefined,
    });
    const cut = this.nodes.map((_, i) => !rnd.answered.has(i));
    if (rnd.won() && cut.some(Boolean)) await this.topUp(rnd, ["LOCK.ACQUIRE", key, owner, ttl, ...mode], cut, grant);
    return rnd;
  }

  /**
   * A wait won by a quorum cut the waits of the other masters (their connections closed: the
   * server drops those waiters, and revokes a grant whose reply did not reach us). A hold on a
   * bare quorum would end with one more master paused, so the same owner asks those masters
   * once more with LOCK.ACQUIRE, which confirms a grant that landed (same token) or takes the
   * key where it is free and nobody queues: the hold is kept by as many masters as will grant
   * it (renewed, released and fenced with all of them).
   */
  private async topUp(rnd: Round<unknown>, acquire: Array<string | number>, cut: boolean[], grant: AckedWrite): Promise<void> {
    const extra = await this.round(acquire, { targets: cut, untilAll: true, write: grant });
    for (const [i, token] of extra.agreed) rnd.addGrant(i, token);
  }

  private async releaseFailed(key: string, owner: string, ttl: number, rnd: Round<unknown>): Promise<void> {
    const { now, later } = rnd.giveBack();
    const release = ["LOCK.RELEASE", key, owner, "FROM", 1];
    if (now.some(Boolean)) {
      const back = await this.round(release, { targets: now, untilAll: true });
      const left = back.unanswered();
      if (left.some(Boolean)) this.releaseLate(ttl, release, left);
    }
    if (later.some(Boolean)) this.releaseLate(ttl, release, later);
  }

  /**
   * @internal Gives a hold back in the background (`args`, or each server's `argsOf`, a
   * release that is harmless to repeat: FROM), on `targets` (default every server): again and
   * again, a little longer apart each time, until every one of them answered, or until `ttl` ms
   * from now (the lease a grant still under way could have) passed; then once more 100 ms
   * later (a grant still under way when the round was decided lands before it).
   */
  releaseLate(ttl: number, args: ReadonlyArray<string | number>, targets?: boolean[], argsOf?: (i: number) => ReadonlyArray<string | number>): void {
    const until = core.now() + ttl + this.writeTimeout;
    this.track(this.giveBack(args, targets ?? this.nodes.map(() => true), until, argsOf, undefined, true));
  }

  /** @internal Runs `job` in the background, waited for by `settle()` and `close()`. */
  track(job: Promise<unknown>): void {
    const quiet = job.catch(() => undefined);
    this.background.add(quiet);
    void quiet.finally(() => this.background.delete(quiet));
  }

  /**
   * @internal `args` (a give-back, harmless to repeat) on `targets` until every one answered or
   * `until` (performance.now() ms) passed; each server's replies go to `onReply`. Resolves with
   * the servers that never answered.
   */
  async giveBack(
    args: ReadonlyArray<string | number>,
    targets: boolean[],
    until: number,
    argsOf?: (i: number) => ReadonlyArray<string | number>,
    onReply?: (i: number, reply: unknown, failure: Failure | undefined) => void,
    again = false,
    afterFirst?: (left: boolean[]) => void,
  ): Promise<boolean[]> {
    let left = [...targets];
    let delay = 20;
    let tries = 0;
    while (left.some(Boolean)) {
      const rnd = await this.round(args, { targets: left, untilAll: true, argsOf });
      tries += 1;
      if (onReply) for (const [i, v] of rnd.agreed) onReply(i, v, undefined);
      if (onReply) for (const [i, f] of rnd.failures) if (left[i]) onReply(i, null, f.refused ? undefined : f);
      const unanswered = rnd.unanswered();
      left = left.map((t, i) => t && !!unanswered[i]);
      if (tries === 1) afterFirst?.(left);
      if (!left.some(Boolean) || core.now() >= until) break;
      await pause(Math.min(delay, Math.max(0, until - core.now())));
      delay = Math.min(delay * 2, 1000);
    }
    if ((again || tries > 1) && !onReply) {
      // A grant still under way (a cut wait's connection the server has not seen close yet),
      // or a request sent before a retry, may land after the first answer.
      await new Promise((r) => setTimeout(r, 100).unref());
      await this.round(args, { targets, untilAll: true, argsOf });
    }
    return left;
  }

  /** Waits for the releases running in the background (call it before a process exits). */
  async settle(): Promise<void> {
    while (this.background.size) await Promise.all([...this.background]);
  }

  /** Releases every hold of this client still held, waits for background releases, and closes the connections it opened for waits. */
  async close(): Promise<void> {
    this.closes += 1;
    const mine = [...live].filter((h) => h.client === this);
    // Whatever still runs under them learns first that they end (hold.signal, hold.lost).
    for (const h of mine) h.end("the client was closed (Relock.close()), which released it");
    await Promise.all(mine.map((h) => h.release().catch(() => false)));
    await this.settle();
    for (const n of this.nodes) n.close();
  }

  // --- elections --------------------------------------------------------------------------

  /**
   * Stands for leader of the election `key` as `value` (a name, an address) and resolves once
   * this candidate leads: LOCK.WAIT with the owner `<value>/<random>`, candidates served in
   * arrival order, waiting up to `timeout` ms (undefined: no limit; `NotAcquiredError` when it
   * passes, and the candidate leaves the queue). The `Leadership` is a hold: `term` (its
   * fencing token: hand it to whatever the leader writes), `signal` aborted when leadership
   * is lost (renewed every ttl/3 meanwhile), `resign()`. One master or a cluster only, and an
   * exclusive key (`InvalidArgumentError` over Redlock masters, `ServerError` on a shared key).
   */
  async campaign(key: string, value: string, options: CampaignOptions = {}): Promise<Leadership> {
    key = core.checkKey(key);
    core.checkElection(key, this.nodes.length, "campaign");
    core.candidateOwner(value);
    // A shared key is refused here; one that turns shared after this look queues the
    // candidate behind its readers, as any exclusive wait.
    await this.leader(key);
    return this.acquireWith(key, { ttl: options.ttl, wait: options.timeout }, () => core.candidateOwner(value), Leadership);
  }

  /** @internal LOCK.FENCED on the one master (see Hold.fenced): sent at most once (Server.callOnce), never again. */
  async fencedCall(key: string, token: number, command: string, args: ReadonlyArray<string | number | Buffer>): Promise<unknown> {
    const node = this.nodes[0];
    if (!node) throw new InvalidArgumentError("no servers");
    try {
      return await node.callOnce(["LOCK.FENCED", key, token, command, ...args], Math.max(this.writeTimeout, 1000));
    } catch (e) {
      if (e instanceof core.Unanswered) throw core.fencedUnanswered(key, node.name, e);
      throw core.fencedError(key, node.name, e);
    }
  }

  /** The leader of the election `key` (LOCK.INFO): `value`, `term`, `owner`, `ttl` left, `waiters`; null when nobody leads. */
  async leader(key: string): Promise<Leader | null> {
    key = core.checkKey(key);
    core.checkElection(key, this.nodes.length, "leader");
    const node = this.nodes[0];
    if (!node) return null;
    let reply: unknown;
    try {
      reply = await node.call(["LOCK.INFO", key], Math.max(this.writeTimeout, 1000));
    } catch (e) {
      throw core.serverError(key, node.name, e);
    }
    return core.parseLeader(key, node.name, reply);
  }

  /**
   * The leaders of the election `key` as they change, for `for await`: first the leader now
   * (`leader` null when nobody leads), then one item after each change seen, with the latest
   * leader (not every term between two wake-ups); `termRegressed` marks a term lower than the
   * last one seen (the store lost history). Each wait is a finite LOCK.OBSERVE (5 s, or half
   * the client's `socketTimeout`/`commandTimeout`) on a connection of its own, asked again on
   * a timeout or a lost connection without reporting a change. Ends when `signal` aborts (or
   * the loop breaks).
   */
  async *observe(key: string, options: ObserveOptions = {}): AsyncGenerator<LeaderChange, void, undefined> {
    key = core.checkKey(key);
    core.checkElection(key, this.nodes.length, "observe");
    const node = this.nodes[0];
    if (!node) return;
    const o = isCluster(node.client) ? node.client.options.redisOptions ?? {} : node.client.options;
    const every = core.observeEvery(o.socketTimeout, o.commandTimeout);
    const seen = new core.Observation();
    const signal = options.signal;
    const cancel: Array<() => void> = [];
    const stop = (): void => {
      for (const f of cancel.splice(0)) f();
    };
    signal?.addEventListener("abort", stop);
    try {
      while (!signal?.aborted) {
        let reply: unknown;
        try {
          reply = seen.started
            ? await node.blocking(["LOCK.OBSERVE", key, seen.known, every], every + Math.max(this.writeTimeout, 1000), cancel)
            : await node.call(["LOCK.INFO", key], Math.max(this.writeTimeout, 1000));
        } catch (e) {
          if (signal?.aborted) return;
          const failure = core.classify(e, node.cluster);
          if (failure.permanent) {
            if (core.errorText(e).startsWith("lock is shared")) throw core.sharedElection(key, node.name);
            throw core.serverError(key, node.name, e);
          }
          if (!failure.timeout) await pause(core.jitter(this.retryDelay));
          continue; // cut: asked again, nothing reported
        } finally {
          cancel.length = 0;
        }
        const change = seen.see(core.parseLeader(key, node.name, reply));
        if (change !== null) yield change;
      }
    } finally {
      signal?.removeEventListener("abort", stop);
    }
  }

  // --- looking at locks -------------------------------------------------------------------

  /**
   * `args` on every server, each reply parsed. `once`: a command not safe to run twice, sent as
   * a fenced write is (Server.callOnce: never again once it may have been written); a lost
   * reply rejects at once, saying it may have run.
   */
  private async queryEach<T>(key: string, args: Array<string | number>, parse: (server: string, reply: unknown) => T, once = false): Promise<T[]> {
    args[1] = core.checkKey(key);
    const out: T[] = [];
    for (const n of this.nodes) {
      try {
        const timeout = Math.max(this.writeTimeout, 1000);
        out.push(parse(n.name, await (once ? n.callOnce(args, timeout) : n.call(args, timeout))));
      } catch (e) {
        if (e instanceof core.Unanswered) throw core.fencedUnanswered(key, n.name, e, String(args[0]));
        throw core.serverError(key, n.name, e);
      }
    }
    return out;
  }

  /** LOCK.INFO: the lock at `key`, or null (with Redlock, the first server's that has one). */
  async info(key: string): Promise<LockInfo | null> {
    return (await this.infoEach(key)).find((i) => i !== null) ?? null;
  }

  /** LOCK.INFO on every server, in the client's order. */
  infoEach(key: string): Promise<Array<LockInfo | null>> {
    return this.queryEach(key, ["LOCK.INFO", key], core.parseInfo);
  }

  /** LOCK.HOLDERS: who holds `key`, in grant order, on every server (`count` 0: all). */
  async holders(key: string, count = 0): Promise<Holder[]> {
    return (await this.queryEach(key, ["LOCK.HOLDERS", key, "COUNT", count], core.parseHolders)).flat();
  }

  /** LOCK.WAITERS: who waits for `key`, in queue order, on every server; a module without it throws a ServerError. */
  async waiters(key: string, count = 0): Promise<Waiter[]> {
    return (await this.queryEach(key, ["LOCK.WAITERS", key, "COUNT", count], core.parseWaiters)).flat();
  }

  /**
   * LOCK.FORCERELEASE on every server: every hold of `key` (or only `owner`'s); returns how many
   * were removed. For operators. Sent at most once to each server, as a fenced write is: run
   * again after its reply was lost, it would remove a hold another owner took since. A lost
   * reply (none in time, or the connection ended first) rejects with a ServerError saying it
   * may have run and was not sent again: look (`holders`) before you force-release again.
   */
  async forceRelease(key: string, owner?: string): Promise<number> {
    const args = owner === undefined ? ["LOCK.FORCERELEASE", key] : ["LOCK.FORCERELEASE", key, owner];
    return (await this.queryEach(key, args, (_s, r) => Number(r), true)).reduce((a, b) => a + b, 0);
  }

  /** LOCK.HISTORY: the journal's entries for `key` (holds that ended other than by their owner, and flushes), newest first, on every server. */
  async history(key: string, count = 10): Promise<LogEntry[]> {
    return (await this.queryEach(key, ["LOCK.HISTORY", key, count], core.parseLog)).flat();
  }

  /** LOCK.LOG (an admin command): the journal of every key, newest first, on every server (every primary of a cluster). */
  async log(count = 10): Promise<LogEntry[]> {
    return (await this.eachNode(["LOCK.LOG", count])).flatMap(([name, r]) => core.parseLog(name, r));
  }

  /** LOCK.LOG RESET on every server: empties the journals. */
  async resetLog(): Promise<void> {
    await this.eachNode(["LOCK.LOG", "RESET"]);
  }

  /** LOCK.STATS (an admin command): the hottest keys by total wait time on every server, hottest first on each. */
  async stats(count = 10): Promise<KeyStats[]> {
    return (await this.eachNode(["LOCK.STATS", "COUNT", count])).flatMap(([name, r]) => core.parseStats(name, r));
  }

  private async eachNode(args: Array<string | number>): Promise<Array<[string, unknown]>> {
    const out: Array<[string, unknown]> = [];
    for (const n of this.nodes) {
      try {
        out.push(...(await n.callNodes(args, Math.max(this.writeTimeout, 1000))));
      } catch (e) {
        throw core.serverError(undefined, n.name, e);
      }
    }
    return out;
  }

  /** @internal Why `owner`'s hold of `keys` ended, from LOCK.HISTORY: one pipelined round trip per server, bounded by the node timeout. */
  async explainLoss(keys: readonly string[], owner: string, since: number): Promise<LossReason> {
    let asked = false;
    for (const n of this.nodes) {
      let replies: unknown[];
      try {
        replies = await n.callMany(keys.map((k) => ["LOCK.HISTORY", k, 100]), this.writeTimeout);
      } catch {
        continue; // no answer: the next server may know
      }
      const ok = replies.filter((r) => !(r instanceof Error));
      asked ||= ok.length > 0;
      const entries = ok.flatMap((r) => core.parseLog(n.name, r)).sort((a, b) => b.time - a.time);
      const loss = core.lossReason(entries, owner, since, Date.now());
      if (loss.cause !== null) return loss;
    }
    if (!asked) return { cause: null, who: null, message: "no server answered LOCK.HISTORY, so relock cannot say why", entry: null };
    return { cause: null, who: null, message: core.UNKNOWN_LOSS, entry: null };
  }

  // --- several keys -----------------------------------------------------------------------

  /**
   * Runs `fn` while holding every key of `keys` exclusively, all or none, under one owner:
   * LOCK.MACQUIRE takes free keys in one step with one token; when some are taken and `wait`
   * allows, the keys are waited for one by one in one global order (their UTF-8 bytes, as
   * every relock client orders them), so overlapping groups never deadlock, and what was
   * taken is given back on failure. Renewed together every ttl/3, released together however
   * `fn` ends. In a Redis Cluster the keys must share a hash slot (a `{hash tag}`).
   */
  async usingAll<T>(keys: string[], options: GroupOptions, fn: (hold: GroupHold) => Promise<T> | T): Promise<T> {
    const hold = await this.acquireAllOrThrow(keys, options);
    try {
      return await fn(hold);
    } finally {
      await hold.release().catch(() => false);
    }
  }

  /** Like `usingAll` without a scope: the `GroupHold`, or null when not all granted in time. */
  async acquireAll(keys: string[], options: GroupOptions = {}): Promise<GroupHold | null> {
    try {
      return await this.acquireAllOrThrow(keys, options);
    } catch (e) {
      if (e instanceof NotAcquiredError) return null;
      throw e;
    }
  }

  /** Like `acquireAll`, throwing `NotAcquiredError` (which says why) instead of returning null. */
  async acquireAllOrThrow(keys: string[], options: GroupOptions = {}): Promise<GroupHold> {
    const group = core.checkKeys(keys);
    const first = this.nodes[0];
    if (first?.cluster && group.length > 1) {
      const slots = new Set(group.map((k) => core.keySlot(k)));
      if (slots.size > 1) {
        throw new InvalidArgumentError(`the keys of a group must share a hash slot in a Redis Cluster (${slots.size} slots): give them one {hash tag}`);
      }
    }
    const ttl = core.checkTtl(options.ttl ?? core.DEFAULT_TTL);
    const wait = core.checkWait(options.wait);
    const deadline = wait === null ? null : core.now() + wait;
    const n = group.length;
    const name = group.join(",");
    const epoch = this.closes;
    for (;;) {
      const owner = this.newOwner();
      const release = ["LOCK.MRELEASE", n, ...group, owner, "FROM", 1];
      const rnd = await this.round(["LOCK.MACQUIRE", n, ...group, owner, ttl], { accept: (r) => core.groupTokens(group, r), write: { undo: release } });
      const until = rnd.validUntil(ttl);
      if (until !== null && this.closes === epoch) return new GroupHold(this, group, owner, ttl, [...rnd.agreed.values()][0] as Record<string, number>, until);
      const { now, later } = rnd.giveBack();
      if (now.some(Boolean)) {
        const left = (await this.round(release, { targets: now, untilAll: true })).unanswered();
        if (left.some(Boolean)) this.releaseLate(ttl, release, left);
      }
      if (later.some(Boolean)) this.releaseLate(ttl, release, later);
      if (this.closes !== epoch) throw this.closedDuring(name);
      if (rnd.permanentlyFailed()) throw rnd.permanentError(group[0] ?? "");
      if (deadline !== null && core.now() >= deadline) throw rnd.acquireError(name, ttl, wait);
      if (this.nodes.length === 1 && !rnd.someFailed()) {
        // Some key is taken or has a queue: wait for the keys one by one, in order.
        const got = await this.waitEach(group, owner, ttl, deadline, epoch);
        if (got instanceof GroupHold) return got;
        if (got === "timeout") throw new NotAcquiredError(`locks ${JSON.stringify(group)}: not all acquired within ${wait} ms`, { key: group[0] });
        continue; // a key taken early was lost while waiting: start again
      }
      // Redlock, a server in its restart grace, or one that did not answer: try again.
      let delay = core.jitter(this.retryDelay);
      if (deadline !== null) delay = Math.min(delay, Math.max(0, deadline - core.now()));
      await pause(delay);
    }
  }

  /**
   * Waits for `group`'s keys one by one in wait order under `owner`, keeping the keys already
   * taken alive (a wait is cut into ttl/3 pieces with a renewal between). The group,
   * "timeout" or "again" (a key taken early was lost: start over); what was taken is given
   * back unless the group is returned.
   */
  private async waitEach(group: string[], owner: string, ttl: number, deadline: number | null, epoch: number): Promise<GroupHold | "timeout" | "again"> {
    const taken: string[] = [];
    const tokens: Record<string, number> = {};
    const allOf = (want: number) => (r: unknown) => (r !== null && r !== undefined && Number(r) === want ? r : null);
    const giveBack = (): void => {
      if (taken.length) this.releaseLate(ttl, ["LOCK.MRELEASE", taken.length, ...taken, owner, "FROM", 1]);
    };
    try {
      for (const key of core.waitOrder(group)) {
        for (;;) {
          const remaining = deadline === null ? null : Math.max(0, deadline - core.now());
          if (remaining === 0) {
            giveBack();
            return "timeout";
          }
          let piece = remaining;
          if (taken.length) piece = remaining === null ? ttl / 3 : Math.min(remaining, ttl / 3);
          const rnd = await this.waitRound(key, owner, ttl, piece, []);
          if (this.closes !== epoch) throw this.closedDuring(group.join(","));
          if (rnd.won()) {
            taken.push(key);
            tokens[key] = Number([...rnd.agreed.values()][0]);
            break;
          }
          if (rnd.permanentlyFailed()) {
            giveBack();
            throw rnd.permanentError(key);
          }
          if (rnd.someFailed()) {
            if (rnd.giveBack().later.some(Boolean)) {
              // A grant that may stand (a wait cut or unanswered) is given back in the
              // background, once more a moment later: that repeat would release this owner's
              // next grant of the key. Everything goes back and the group starts over under a
              // new owner (spec/client-cases/README.md, "A late give-back never meets the same
              // owner's next grant"). A grant not acknowledged and already taken back
              // (Round.giveBack) needs none of that.
              this.releaseLate(ttl, ["LOCK.RELEASE", key, owner, "FROM", 1]);
              giveBack();
              await pause(Math.min(core.jitter(this.retryDelay), remaining ?? Infinity));
              return "again";
            }
            await pause(Math.min(core.jitter(this.retryDelay), remaining ?? Infinity));
          }
          if (taken.length) {
            const renewal = await this.round(["LOCK.MRENEW", taken.length, ...taken, owner, ttl], { accept: allOf(taken.length), write: {} });
            if (renewal.renewVerdict() === "lost") {
              giveBack();
              return "again";
            }
          }
        }
      }
      // The first keys' ttl ran while later ones were waited for: measure the validity.
      const renewal = await this.round(["LOCK.MRENEW", group.length, ...group, owner, ttl], { accept: allOf(group.length), write: {} });
      const until = renewal.validUntil(ttl);
      if (until === null) {
        giveBack();
        return "again";
      }
      if (this.closes !== epoch) throw this.closedDuring(group.join(","));
      const ordered: Record<string, number> = {};
      for (const k of group) ordered[k] = tokens[k] ?? 0;
      return new GroupHold(this, group, owner, ttl, ordered, until);
    } catch (e) {
      this.releaseLate(ttl, ["LOCK.MRELEASE", group.length, ...group, owner, "FROM", 1]);
      throw e;
    }
  }
}

/**
 * A lock held by this process, renewed in the background until released.
 *
 * `token` is the fencing token (with Redlock, the largest of the granting servers' tokens, so
 * that it grows from one holder to the next; `tokens` has each server's). `signal` is aborted
 * the moment the hold is known lost, and at the latest a little before its validity ends; its
 * `reason` is a `LockLostError`. `signal.aborted`, `signal.reason`, `signal.throwIfAborted()`,
 * `lost` and `check()` read the clock too, so code that runs after the event loop was blocked
 * past the validity sees the loss before any timer could run.
 */
export class Hold {
  /** The fencing token to send with every write: with Redlock, the largest granting server's. */
  token: number;
  /** Whether the hold is shared (a read lock or a permit); true after `downgrade()`. */
  shared: boolean;
  /** Why the hold was lost, once it is. */
  reason: string | undefined;
  /** The server's account of the loss (LOCK.HISTORY): `cause`, `who`, `message`; undefined while held, or when the client did not ask (a blocked event loop). */
  loss: LossReason | undefined;
  /** @internal No journal entry of this hold is older (Unix ms). */
  readonly since: number;
  private abort: AbortController | undefined;
  private get controller(): AbortController {
    if (!this.abort) {
      this.abort = new AbortController();
      readsTheClock(this.abort.signal, () => this.expireIfPast());
    }
    return this.abort;
  }
  /** The error the signal was aborted with, once the hold is lost. */
  private ended: LockLostError | undefined;
  /** The servers said it is gone and the reason is being asked for (`loseWithHistory`). */
  private known: LockLostError | undefined;
  private released = false;
  private timer: Timer | undefined;
  private renewing: Promise<void> | undefined;
  private lastFailure: string | undefined;
  /**
   * Each server's hold count as the client knows it: the `FROM` of the next LOCK.REENTER or
   * LOCK.RELEASE step there, so that a step sent twice (a lost reply) is applied once.
   */
  private counts: number[];
  /** The count-changing steps (LOCK.REENTER, LOCK.RELEASE), one at a time, in order. */
  private steps: Promise<unknown> = Promise.resolve();
  /**
   * Steps of the count still being given back in the background (a section's exit the servers
   * did not answer while the hold waited): a section's entry waits for them (`settleSteps`).
   */
  private lateSteps = new Set<Promise<unknown>>();
  /** Renewals, one at a time, in order: a reply never lands after a later renewal's. */
  private renewals: Promise<unknown> = Promise.resolve();
  /** Renewals sent, and the last one whose reply was applied (a late reply is never applied after a newer one). */
  private renewSent = 0;
  private renewApplied = 0;
  /** Until when (performance.now() ms) a server may keep the lease: the last request that set its ttl, sent at most then, plus that ttl. */
  private leaseEnd: number;

  /** @internal */
  constructor(
    /** @internal */ readonly client: Relock,
    readonly key: string,
    readonly owner: string,
    /** The lease in ms (the last one asked for). */
    public ttl: number,
    readonly tokens: Readonly<Record<string, number>>,
    /** Until when (`performance.now()` ms) the hold is ours for sure. */
    public validUntil: number,
    private mode: string[],
  ) {
    // The largest (docs/safety.md): every master's counter is floored at the wall clock and a
    // later holder is minted newer tokens where the quorums overlap; the first master's token
    // alone can be older than the previous holder's.
    this.token = Math.max(0, ...Object.values(tokens));
    this.shared = mode.length > 0;
    this.since = Date.now(); // granted just before: an older flush is not its end (1 s slack for clocks)
    this.counts = client.servers.map(() => 1);
    this.leaseEnd = core.now() + ttl;
    live.add(this);
    watchExit();
    this.schedule(core.now() + Math.max(ttl / 3, 1));
  }

  /** The server's word for the loss (`loss.cause`: `expired`, `forcereleased`, `deleted`, `flushed`, ...), undefined while held or when nobody can say. */
  get lossCause(): string | undefined {
    return this.loss?.cause ?? undefined;
  }

  /** The client that ended the hold (`loss.who`), where the server could tell. */
  get who(): Who | undefined {
    return this.loss?.who ?? undefined;
  }

  /** The keys held: `[key]`, or a group's keys in the order given. */
  get keys(): string[] {
    return [this.key];
  }

  /** @internal */
  protected renewArgs(ttl: number): Array<string | number> {
    return ["LOCK.RENEW", this.key, this.owner, ttl];
  }

  /** @internal The release of one step on server `i`: from the count the client knows there. */
  protected releaseArgs(i: number): Array<string | number> {
    return ["LOCK.RELEASE", this.key, this.owner, "FROM", Math.max(1, this.counts[i] ?? 1)];
  }

  /** @internal A renewal's or release's reply as agreed (the reply) or refused (null). */
  protected allHeld(reply: unknown): unknown {
    return reply;
  }

  /** @internal */
  protected refusedWords(servers: string[]): string {
    return `LOCK.RENEW answered nil on ${servers.join(", ")}: the lock expired or was taken away`;
  }

  /**
   * Aborted when the hold is lost; `signal.reason` is the `LockLostError`. Reading
   * `signal.aborted` or `signal.reason`, or calling `signal.throwIfAborted()`, reads the clock
   * too (as `lost` does): past the validity the signal is aborted then and there, even when
   * a blocked event loop kept the loss timer from running.
   */
  get signal(): AbortSignal {
    this.expireIfPast();
    return this.controller.signal;
  }

  /**
   * Whether the hold is known lost, reading the clock too: after the event loop was blocked
   * past the validity, this is true before any timer had a chance to run.
   */
  get lost(): boolean {
    this.expireIfPast();
    return this.ended !== undefined || this.known !== undefined;
  }

  /** Throws the `LockLostError` if the hold is lost, released, or past its validity. */
  check(): void {
    this.expireIfPast();
    if (this.ended) throw this.ended;
    if (this.released) throw core.lostError(this.key, "it was released");
    if (this.known) throw this.known;
  }

  /** Loses the hold when the clock says its validity has passed, whether or not a timer ran. */
  private expireIfPast(): void {
    if (!this.released && !this.ended && core.now() >= this.lostAt()) this.lose(this.expiryReason());
  }

  private lostAt(): number {
    return this.validUntil - core.lossLead(this.ttl);
  }

  private expiryReason(): string {
    if (this.renewing) return "its validity ran out during a renewal that no quorum answered";
    if (this.lastFailure) return `its validity ran out: renewals failed (${this.lastFailure})`;
    return `its validity ran out before it could be renewed (the event loop did not run the renewal in time: blocked longer than the ${this.ttl} ms ttl?)`;
  }

  private lose(reason: string, loss?: LossReason): void {
    if (this.released || this.ended) return;
    this.end(reason, loss);
    live.delete(this);
    // Whatever servers still have it should not keep it until the ttl.
    this.client.releaseLate(this.ttl, this.releaseArgs(0), undefined, (i) => this.releaseArgs(i));
  }

  /**
   * @internal The hold ends on the client's side (lost, the client closed, the process
   * exiting): its holders are told first (`signal` aborted, `lost` true, `check()` throws),
   * before anything is released under them.
   */
  end(reason: string, loss?: LossReason): void {
    if (this.released || this.ended) return;
    this.reason = reason;
    this.loss = loss;
    this.timer?.clear();
    this.ended = core.lostError(this.key, reason, loss, this.client.servers);
    this.controller.abort(this.ended);
  }

  /** Runs `fn` after every earlier call made through the same chain has settled. */
  private inOrder<T>(chain: "steps" | "renewals", fn: () => Promise<T>): Promise<T> {
    const run = this[chain].then(fn, fn);
    this[chain] = run.catch(() => undefined);
    return run;
  }

  /** The hold is gone: asks the journal why (one bounded round trip) and says it. */
  private async loseWithHistory(rnd: Round<unknown>): Promise<void> {
    const refused = rnd.servers((f) => !!f.refused);
    const what = refused.length ? this.refusedWords(refused) : `renewal failed: ${rnd.describe((f) => !!f.permanent)}`;
    // Known lost from here: `check()` and `lost` say so while the journals are asked why (up
    // to a node timeout per server, a stopped one first in line), and the signal aborts with
    // the reason once it is in.
    this.known ??= core.lostError(this.key, what, undefined, this.client.servers);
    const loss = await this.client.explainLoss(this.keys, this.owner, this.since);
    const where = loss.entry && this.keys.length > 1 && loss.entry.key ? `key ${JSON.stringify(loss.entry.key)} ` : "";
    this.lose(`${what}: ${where}${loss.message}`, loss);
  }

  private schedule(at: number): void {
    this.timer?.clear();
    const wake = Math.min(at, this.lostAt());
    this.timer = new Timer(() => this.onTimer(), wake - core.now()).unref();
  }

  private onTimer(): void {
    if (this.released || this.ended) return;
    if (core.now() >= this.lostAt()) {
      this.lose(this.expiryReason());
      return;
    }
    if (this.renewing) return;
    this.renewing = this.renewRound(undefined)
      .then((ok) => {
        const every = Math.max(this.ttl / 3, 1);
        if (ok) this.schedule(core.now() + every);
        else this.schedule(core.now() + Math.min(every / 4, Math.max(0, this.validUntil - core.now()) / 2));
      })
      .catch(() => undefined)
      .finally(() => {
        this.renewing = undefined;
      });
    // The loss deadline still counts while the renewal is under way.
    this.schedule(this.lostAt());
  }

  /**
   * One renewal round: true when renewed, false when only unanswered (try again); throws
   * when lost, and (`explicit`: `renew(ttl)`) a `ServerError` when the servers refused the ttl.
   */
  private async renewRound(ttl: number | undefined, explicit = false): Promise<boolean> {
    // The background renewal (ttl undefined) takes the hold's ttl when its turn comes: queued
    // behind renew(60000), it must not send the old ttl after it and shorten the lease.
    const ms = ttl === undefined ? undefined : core.checkTtl(ttl);
    this.check();
    return this.inOrder("renewals", () => this.renewOnce(ms ?? core.checkTtl(this.ttl), explicit));
  }

  private async renewOnce(ms: number, explicit: boolean): Promise<boolean> {
    this.check();
    const seq = ++this.renewSent;
    this.leaseEnd = Math.max(this.leaseEnd, core.now() + ms + this.client.writeTimeout);
    const rnd = await this.client.round(this.renewArgs(ms), { accept: (r) => this.allHeld(r), write: {} });
    const until = rnd.validUntil(ms);
    if (until !== null) {
      if (this.ended) {
        // Lost while the round ran (its validity ran out and it is being given back): the
        // servers' renewal, applied before that give-back, does not revive it. Before, this
        // answered true, and renew() resolved for a hold given back (the Go client's
        // Mutex.Extend did the same in the attack round of 2026-12-05).
        if (explicit) throw this.ended;
        return false;
      }
      if (this.released) return true;
      if (core.now() >= this.lostAt()) return false;
      if (seq < this.renewApplied) return true; // a newer renewal's reply is in already
      this.renewApplied = seq;
      this.ttl = ms;
      this.validUntil = until;
      this.lastFailure = undefined;
      // renew(ttl): the next background renewal follows the new ttl (a shorter one must not
      // wait for the old schedule).
      if (explicit && !this.renewing) this.schedule(core.now() + Math.max(ms / 3, 1));
      return true;
    }
    if (rnd.badTtl()) {
      // The servers refused the ttl and changed nothing: the hold is still ours.
      this.lastFailure = rnd.describe();
      if (explicit) throw rnd.badTtlError(this.key, ms, this.ttl);
      return false;
    }
    if (rnd.renewVerdict() === "lost") {
      await this.loseWithHistory(rnd);
      this.check();
    }
    this.lastFailure = rnd.describe();
    return false;
  }

  /**
   * Renews now (`ttl` ms from now, default the hold's ttl, which it becomes). Throws
   * `LockLostError` when the hold is gone, `NotAcquiredError` when servers did not answer
   * (the hold stays valid until its validity ends; the background renewal goes on), a
   * `ServerError` (not retryable) when they refused the ttl (longer than
   * `relock.restart-grace-ms`: the hold is kept, with its ttl).
   */
  async renew(ttl?: number): Promise<void> {
    if (!(await this.renewRound(ttl, true))) {
      throw new NotAcquiredError(`lock ${JSON.stringify(this.key)}: renewal failed (${this.lastFailure})`, { key: this.key });
    }
  }

  /**
   * Stops the renewal and releases the hold: true when a quorum released it, false when it
   * was no longer held (lost, or released before) or servers did not answer (released there
   * again in the background). Rejects with a `ServerError` (not retryable) when servers
   * refused the release with errors retrying cannot fix (`NOPERM`...) and those alone leave no
   * quorum: the lock stays held there until its ttl runs out (a minority of them, with other
   * servers that did not answer, is false: those are asked again in the background).
   */
  async release(): Promise<boolean> {
    if (this.released) return false;
    this.released = true;
    live.delete(this);
    this.timer?.clear();
    return this.inOrder("steps", async () => {
      const rnd = await this.client.round(this.releaseArgs(0), {
        untilAll: this.client.servers.length > 1,
        accept: (r) => this.allHeld(r),
        argsOf: (i) => this.releaseArgs(i),
      });
      for (const [i, v] of rnd.agreed) this.counts[i] = Number(v);
      // Not answered (a lost reply, a stall): sent again until answered, or until the lease
      // would have ended anyway. FROM makes a repeat of an applied step change nothing.
      const unanswered = rnd.unanswered();
      if (unanswered.some(Boolean)) {
        this.client.track(this.client.giveBack(this.releaseArgs(0), unanswered, this.leaseEnd, (i) => this.releaseArgs(i)));
      }
      if (rnd.won()) return true;
      const error = rnd.releaseError(this.key);
      if (error) throw error;
      return false;
    });
  }

  /**
   * `command args...` run by the server only while this hold's token is the live one
   * (`LOCK.FENCED key token command args...`, atomically with that check); resolves to the
   * command's reply. A stale token rejects with `StaleTokenError` (never retried: nothing
   * ran). One master or a cluster only (`InvalidArgumentError` on a Redlock hold: each master
   * has its own tokens); in a cluster every key of the command shares the lock's hash slot.
   */
  async fenced(command: string, ...args: Array<string | number | Buffer>): Promise<unknown> {
    const [key, token] = this.fence();
    core.checkFenced(key, this.client.servers.length);
    return this.client.fencedCall(key, token, command, args);
  }

  /** The key and token LOCK.FENCED checks. */
  protected fence(): [string, number] {
    return [this.key, this.token];
  }

  /**
   * Turns this exclusive hold into a shared one (LOCK.DOWNGRADE) in one atomic step, keeping
   * its token, ttl and count; the readers at the head of the queue are let in with it.
   * Allowed on a key without a limit (`OtherLimitError` otherwise); a shared hold stays as it
   * is. No upgrade: release and acquire exclusively again. Throws `LockLostError` when the
   * hold is gone, `NotAcquiredError` (retryable: downgrading twice is safe) when servers did
   * not answer.
   */
  async downgrade(): Promise<void> {
    this.check();
    const rnd = await this.client.round(["LOCK.DOWNGRADE", this.key, this.owner], { untilAll: true });
    if (rnd.won()) {
      this.shared = true;
      this.mode = ["SHARED"];
      return;
    }
    if (rnd.permanentlyFailed()) throw rnd.permanentError(this.key);
    if (rnd.renewVerdict() === "lost") {
      await this.loseWithHistory(rnd);
      this.check();
    }
    throw new NotAcquiredError(`lock ${JSON.stringify(this.key)}: downgrade not answered by a quorum (${rnd.describe()}); retry`, {
      key: this.key,
      servers: rnd.servers((f) => !f.refused),
    });
  }

  /**
   * Runs `fn` in a nested section under the same owner (LOCK.REENTER), with the hold count.
   * Each step says the count it expects (`FROM`), so a step sent twice is applied once; a
   * LOCK.REENTER whose reply never came is taken back on the same connection (LOCK.RELEASE
   * FROM c+1: it answers c whether or not the re-entry ran). Throws `LockLostError` when the
   * hold is gone, `NotAcquiredError` (retryable) when servers did not answer.
   */
  async reenter<T>(fn: (count: number) => Promise<T> | T): Promise<T> {
    this.check();
    const ttl = core.checkTtl(this.ttl);
    const rnd = await this.inOrder("steps", async () => {
      await this.settleSteps();
      const from = [...this.counts];
      const entry = (i: number): Array<string | number> => ["LOCK.REENTER", this.key, this.owner, ttl, ...this.mode, "FROM", Math.max(1, from[i] ?? 1)];
      this.leaseEnd = Math.max(this.leaseEnd, core.now() + ttl + this.client.writeTimeout);
      // Not acknowledged by the replicas: taken back at once (and again below, harmlessly: FROM).
      const undo = (i: number): Array<string | number> => ["LOCK.RELEASE", this.key, this.owner, "FROM", Math.max(1, from[i] ?? 1) + 1];
      const r = await this.client.round(entry(0), { untilAll: true, argsOf: entry, write: { undo } });
      for (const [i, v] of r.agreed) this.counts[i] = Number(v);
      for (const [i, f] of r.failures) {
        const other = /hold count is (\d+)/.exec(f.message);
        if (other) this.counts[i] = Number(other[1]);
      }
      const unanswered = r.unanswered();
      if (unanswered.some(Boolean)) await this.stepBack(unanswered, (i) => Math.max(1, from[i] ?? 1) + 1);
      if (!r.won()) await this.stepBack(r.agreedBy());
      return r;
    });
    if (!rnd.won()) {
      if (rnd.permanentlyFailed()) throw rnd.permanentError(this.key);
      if (rnd.refused() > 0) {
        throw new LockLostError(`lock ${JSON.stringify(this.key)}: re-entry refused (${rnd.describe()})`, "re-entry refused", undefined, { key: this.key });
      }
      throw new NotAcquiredError(`lock ${JSON.stringify(this.key)}: re-entry not answered by a quorum (${rnd.describe()}); taken back, retry`, {
        key: this.key,
        servers: rnd.servers((f) => !f.refused),
      });
    }
    try {
      return await fn(Math.max(...[...rnd.agreed.values()].map(Number)));
    } finally {
      await this.inOrder("steps", () => this.stepBack(rnd.agreedBy()));
    }
  }

  /**
   * One LOCK.RELEASE step on `targets`, from `from(i)` (default the count the client knows):
   * sent again until each answered while the hold lasts, then on in the background until the
   * lease would have ended anyway. The count each answers is the one the client knows then.
   */
  private async stepBack(targets: boolean[], from?: (i: number) => number): Promise<void> {
    const args = (i: number): Array<string | number> => ["LOCK.RELEASE", this.key, this.owner, "FROM", Math.max(1, from ? from(i) : (this.counts[i] ?? 1))];
    const onReply = (i: number, reply: unknown, failure: Failure | undefined): void => {
      // `ERR hold count is n, not c`: the server's count is the one to go on from.
      const other = failure && /hold count is (\d+)/.exec(failure.message);
      if (other) this.counts[i] = Number(other[1]);
      if (failure) return;
      this.counts[i] = reply === null || reply === undefined ? 0 : Number(reply);
    };
    // While the hold lasts: the body after it must see the count the server has. With several
    // masters, one try: a master that is down would hold up every step for ttl/3 (a Redlock
    // hold goes on without it, and a count it gets wrong is outvoted); it is asked again in
    // the background.
    const until = (): number => (this.ended || this.released || this.client.servers.length > 1 ? core.now() : this.leaseEnd);
    const left = await this.client.giveBack(args(0), targets, Math.min(until(), core.now() + Math.max(this.ttl / 3, this.client.writeTimeout * 4)), args, onReply);
    if (left.some(Boolean)) {
      // With several masters, a first try that leaves one unanswered (down: a Redlock hold goes
      // on without it, and a count it gets wrong is outvoted) no longer holds up the next entry,
      // which would otherwise wait for it until the lease ends. With one server the entry
      // needs that server anyway: it waits.
      let down: () => void = () => undefined;
      const unanswered = new Promise<void>((res) => (down = res));
      const afterFirst = this.client.servers.length > 1 ? (l: boolean[]) => l.some(Boolean) && down() : undefined;
      const late = this.client.giveBack(args(0), left, this.leaseEnd, args, onReply, false, afterFirst);
      this.client.track(late);
      const settled = Promise.race([late.catch(() => undefined), unanswered]);
      this.lateSteps.add(settled);
      void settled.finally(() => this.lateSteps.delete(settled));
    }
  }

  /**
   * In the step order, before a section's entry: waits while a step of the count is still
   * being given back in the background. Its FROM is the count the client knows when it is
   * sent, and an entry asks FROM that same count: landing after the entry, the give-back took
   * the new section's level (the section was told one count too many, or refused). Bounded:
   * a give-back ends with the lease; a hold lost meanwhile throws (`check`).
   */
  private async settleSteps(): Promise<void> {
    while (this.lateSteps.size) {
      this.check();
      await Promise.race([pause(10), ...this.lateSteps]);
    }
    this.check();
  }
}

/**
 * Several keys held together by one owner (`usingAll`/`acquireAll`), renewed together
 * (LOCK.MRENEW) and released together (LOCK.MRELEASE). `key` is the first key, `keys` all of
 * them; `keyTokens` each key's fencing token: one token for every key when they were granted
 * in one step, each key its own after a wait; `token` is the largest. A group is lost as soon
 * as one of its keys is.
 */
export class GroupHold extends Hold {
  readonly keyTokens: Readonly<Record<string, number>>;
  private readonly group: string[];

  /** @internal */
  constructor(client: Relock, keys: string[], owner: string, ttl: number, keyTokens: Record<string, number>, validUntil: number) {
    const token = Math.max(...Object.values(keyTokens));
    super(client, keys[0] ?? "", owner, ttl, { [client.servers[0] ?? ""]: token }, validUntil, []);
    this.group = [...keys];
    this.keyTokens = { ...keyTokens };
    this.token = token;
  }

  override get keys(): string[] {
    return [...this.group];
  }

  protected override renewArgs(ttl: number): Array<string | number> {
    return ["LOCK.MRENEW", this.group.length, ...this.group, this.owner, ttl];
  }

  protected override releaseArgs(_i: number): Array<string | number> {
    return ["LOCK.MRELEASE", this.group.length, ...this.group, this.owner, "FROM", 1];
  }

  protected override allHeld(reply: unknown): unknown {
    return reply !== null && reply !== undefined && Number(reply) === this.group.length ? reply : null;
  }

  protected override refusedWords(servers: string[]): string {
    return `LOCK.MRENEW found part of the group no longer held on ${servers.join(", ")}`;
  }

  protected override fence(): [string, number] {
    const key = this.group[0] ?? "";
    return [key, this.keyTokens[key] ?? this.token];
  }

  override downgrade(): Promise<void> {
    return Promise.reject(new InvalidArgumentError("a group of keys is held exclusively: downgrade is for one key"));
  }

  override reenter<T>(_fn: (count: number) => Promise<T> | T): Promise<T> {
    return Promise.reject(new InvalidArgumentError("a group of keys is not reentrant: hold the group once"));
  }
}

/**
 * A leadership won by `Relock.campaign()`: the hold of the election's key. `term` is its
 * fencing token (hand it to whatever the leader writes, or use `fenced()`), `value` the
 * proclaimed value; `signal` aborts (with `reason`) when leadership is lost, and `resign()`
 * hands it to the next candidate in the same step.
 */
export class Leadership extends Hold {
  /** The term: the hold's fencing token, larger than every earlier term of the key. */
  get term(): number {
    return this.token;
  }

  /** The proclaimed value: the owner without its last `/`-part. */
  get value(): string {
    return core.proclaimed(this.owner);
  }

  /** Ends the leadership (LOCK.RELEASE): the next candidate leads in the same step. As `release()`. */
  resign(): Promise<boolean> {
    return this.release();
  }

  override downgrade(): Promise<void> {
    return Promise.reject(new InvalidArgumentError("a leadership is an exclusive hold: it is never downgraded"));
  }
}

export { RelockError, ServerError };
