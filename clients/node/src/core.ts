/**
 * What needs no I/O: defaults and limits, owners, the Redlock round (who agreed, whether a
 * quorum is won or lost, the validity left), the classification of failures into transient
 * and permanent, and the decoding of replies under RESP2 and RESP3. It follows
 * relock-client (client/src/round.rs, validity.rs, limits.rs, error.rs) rule for rule.
 */
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

import clusterKeySlot = require("cluster-key-slot");

import {
  InvalidArgumentError,
  LockLostError,
  NotAcquiredError,
  OtherLimitError,
  OtherModeError,
  OtherPermitsError,
  RelockError,
  ServerError,
  StaleTokenError,
} from "./errors";

/** Default lease: 30 s (relock-client's and lockctl's). */
export const DEFAULT_TTL = 30_000;
/** How long one server may take to answer one command: 100 ms. */
export const DEFAULT_NODE_TIMEOUT = 100;
/** The mean pause between two Redlock rounds of a wait (drawn from half to 1.5 times it). */
export const DEFAULT_RETRY_DELAY = 200;
/** How long a Redlock wait keeps a minority of grants while it waits for a quorum. */
export const DEFAULT_MAX_PARTIAL_HOLD = 500;
/** How long a master waits for the replica acknowledgements of a write (`replicaAcks`): 500 ms. */
export const DEFAULT_REPLICA_ACK_TIMEOUT = 500;
/** The largest ttl_ms and timeout_ms the LOCK.* commands accept. */
export const MAX_MS = 1_000_000_000_000;
/**
 * The smallest usable ttl in ms (relock-client's MIN_TTL): the least ttl whose validity after
 * the drift allowance (1 % + 2 ms) is at least half of it. 1 and 2 ms leave no validity at all
 * (every acquisition would fail, and a wait would start again forever); 3 and 4 ms leave less
 * than a renewal needs.
 */
export const MIN_TTL = 5;
/** The largest LIMIT the module accepts. */
export const MAX_LIMIT = 1_000_000;
const MAX_OWNER = 256;

export const now = (): number => performance.now();

/** A ttl in ms as the `ttl_ms` sent: whole milliseconds, 5 (`MIN_TTL`) to 10^12. */
export function checkTtl(ttl: number): number {
  const ms = Math.trunc(ttl);
  if (typeof ttl === "number" && ttl > 0 && ms < MIN_TTL) {
    throw new InvalidArgumentError(
      `invalid ttl ${ttl}: the smallest usable ttl is ${MIN_TTL} ms, since the drift allowance of 1 % + 2 ms leaves less than half of a shorter one valid`,
    );
  }
  if (!Number.isFinite(ttl) || ms < MIN_TTL || ms > MAX_MS) {
    throw new InvalidArgumentError(`invalid ttl ${ttl} (must be ${MIN_TTL} ms to 10^12 ms)`);
  }
  return ms;
}

export function checkWait(wait: number | null | undefined): number | null {
  if (wait === undefined || wait === null) return null;
  if (typeof wait !== "number" || Number.isNaN(wait) || wait < 0) {
    throw new InvalidArgumentError(`invalid wait ${wait} (undefined, 0 or a positive number of ms)`);
  }
  return Math.min(wait, MAX_MS);
}

/** What is left of a wait as LOCK.WAIT's timeout_ms: 0 (no limit) for null, else 1..10^12. */
export function waitMs(remaining: number | null): number {
  if (remaining === null) return 0;
  return Math.max(1, Math.min(MAX_MS, Math.floor(remaining)));
}

export function modeArgs(shared: boolean, limit: number | undefined, permits?: number): string[] {
  if (limit !== undefined) return ["SHARED", "LIMIT", String(limit), ...(permits === undefined ? [] : ["PERMITS", String(permits)])];
  return shared ? ["SHARED"] : [];
}

/** A limit in 1 .. 10^6, never over several independent masters; permits (1 to the limit) only with a limit. */
export function checkMode(limit: number | undefined, masters: number, permits?: number): void {
  if (permits !== undefined) {
    if (limit === undefined) throw new InvalidArgumentError(`permits ${permits} needs a limit: several permits are taken of a semaphore`);
    if (!Number.isInteger(permits) || permits < 1 || permits > limit) {
      throw new InvalidArgumentError(`invalid permits ${permits} (must be 1 to the limit, ${limit})`);
    }
  }
  if (limit === undefined) return;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new InvalidArgumentError(`invalid limit ${limit} (must be 1 to ${MAX_LIMIT})`);
  }
  if (masters > 1) {
    throw new InvalidArgumentError(
      `a limit (${limit}) needs one server or a Redis Cluster, not ${masters} independent masters: ` +
        "a quorum cannot count permits (with limit 2 on masters A, B and C, three clients can hold " +
        "{A,B}, {B,C} and {A,C}); a shared lock without a limit is sound over a quorum",
    );
  }
}

/** The clock drift allowed for a lock of `ttl` ms: 1 % plus 2 ms. */
export function drift(ttl: number): number {
  return ttl / 100 + 2;
}

/**
 * ttl - elapsed - drift, or null when nothing is left. Counted in whole microseconds, so that
 * a round that used up exactly the ttl less the drift leaves nothing, not a float rounding's
 * 10^-16 ms (exact up to the largest ttl, 10^12 ms).
 */
export function validity(ttl: number, elapsed: number): number | null {
  const ttlUs = Math.round(ttl * 1000);
  const left = ttlUs - Math.round(Math.max(0, elapsed) * 1000) - (Math.floor(ttlUs / 100) + 2000);
  return left > 0 ? left / 1000 : null;
}

/** How long before its validity ends a hold is reported lost: ttl/20, at most 20 ms. */
export function lossLead(ttl: number): number {
  return Math.min(ttl / 20, 20);
}

export function jitter(delay: number): number {
  return delay / 2 + Math.random() * delay;
}

/**
 * A fresh owner: `<prefix>/<random>`, the prefix being `<host>/<pid>` unless given (`""`:
 * the random part alone). The random part (128 bits) keeps two holders from ever sharing an
 * owner; the prefix is cut to fit 256 bytes, never it.
 */
export function makeOwner(prefix: string | undefined): string {
  const rand = randomBytes(16).toString("hex");
  const text = prefix === undefined ? `${hostname()}/${process.pid}` : prefix;
  if (text === "") return rand;
  const room = MAX_OWNER - rand.length - 1;
  let cut = Buffer.from(text, "utf8").subarray(0, room).toString("utf8");
  while (Buffer.byteLength(cut, "utf8") > room) cut = cut.slice(0, -1);
  return `${cut}/${rand}`;
}

// --- replies ------------------------------------------------------------------------------

export function text(v: unknown): string | null {
  if (v === null || v === undefined) return null;
  if (Buffer.isBuffer(v)) return v.toString("utf8");
  return String(v);
}

/** A map reply: a flat [name, value, ...] array (RESP2, or ioredis's RESP3 default), a Map or an object. */
export function asMap(reply: unknown): Map<string, unknown> {
  const out = new Map<string, unknown>();
  if (reply instanceof Map) {
    for (const [k, v] of reply) out.set(text(k) ?? "", v);
  } else if (Array.isArray(reply)) {
    for (let i = 0; i + 1 < reply.length; i += 2) out.set(text(reply[i]) ?? "", reply[i + 1]);
  } else if (reply && typeof reply === "object") {
    for (const [k, v] of Object.entries(reply)) out.set(k, v);
  }
  return out;
}

const int = (v: unknown, dflt = 0): number => {
  if (v === null || v === undefined) return dflt;
  const n = Number(v);
  return Number.isFinite(n) ? n : dflt;
};

/**
 * Who ended a hold, as LOCK.HISTORY's `client-info` shows it (the fields of CLIENT LIST):
 * always known for LOCK.FORCERELEASE, for other commands where the server lets the module
 * see the caller.
 */
export interface Who {
  /** The connection's id (CLIENT ID). */
  client: number | null;
  /** Its CLIENT SETNAME name, null when it has none. */
  name: string | null;
  user: string | null;
  addr: string | null;
  /** The command it ran (`cmd=`). */
  command: string | null;
}

export function describeWho(w: Who): string {
  const parts = (
    [
      ["name", w.name],
      ["user", w.user],
      ["addr", w.addr],
    ] as const
  )
    .filter(([, v]) => v)
    .map(([k, v]) => `${k} ${v}`);
  const who = w.client === null ? "a client" : `client ${w.client}`;
  return parts.length ? `${who} (${parts.join(", ")})` : who;
}

/** `client-info` (`id=7 addr=... name=ops ... user=admin ...`), null when empty. */
export function parseWho(info: unknown): Who | null {
  const raw = text(info) ?? "";
  if (!raw.trim()) return null;
  const f = new Map<string, string>();
  for (const part of raw.split(" ")) {
    const eq = part.indexOf("=");
    if (eq > 0) f.set(part.slice(0, eq), part.slice(eq + 1));
  }
  const id = f.get("id");
  return {
    client: id && /^\d+$/.test(id) ? Number(id) : null,
    name: f.get("name") || null,
    user: f.get("user") || null,
    addr: f.get("addr") || null,
    command: f.get("cmd") || null,
  };
}

/**
 * One entry of the server's journal of holds that ended other than by their owner
 * (LOCK.LOG, LOCK.HISTORY). A flush or a swap is one entry with an empty `key` and `owner`.
 */
export interface LogEntry {
  server: string;
  id: number;
  /** When it ended, Unix ms (the server's clock). */
  time: number;
  db: number;
  key: string;
  owner: string;
  token: number;
  /** `expired`, `forcereleased`, `deleted`, `evicted`, `revoked`, `restored`, `moved`, `flushed`, `swapped`. */
  reason: string;
  /** ms from grant to end; null for holds granted before the server started. */
  held: number | null;
  who: Who | null;
  waiters: number;
}

export function parseLog(server: string, reply: unknown): LogEntry[] {
  if (!Array.isArray(reply)) return [];
  return reply.map((e) => {
    const m = asMap(e);
    const held = m.get("held");
    return {
      server,
      id: int(m.get("id")),
      time: int(m.get("time")),
      db: int(m.get("db")),
      key: text(m.get("key")) ?? "",
      owner: text(m.get("owner")) ?? "",
      token: int(m.get("token")),
      reason: text(m.get("reason")) ?? "",
      held: held === null || held === undefined || text(held) === "" ? null : int(held),
      who: parseWho(m.get("client-info")),
      waiters: int(m.get("waiters")),
    };
  });
}

/**
 * Why a hold was lost, from the server's journal (LOCK.HISTORY): `cause` is its word
 * (`expired`, `forcereleased`, `deleted`, `flushed`, ...), `who` the client that ended it
 * where the server could tell, `message` both in words. `cause` is null when the journal
 * had nothing on it (a failover, a restart, a journal that is off): then nobody can say why.
 */
export interface LossReason {
  cause: string | null;
  who: Who | null;
  message: string;
  entry: LogEntry | null;
}

/** Said when LOCK.HISTORY has no entry for a lost hold. */
export const UNKNOWN_LOSS =
  "the server's journal (LOCK.HISTORY) has nothing on it, so it cannot say why " +
  "(a failover or restart empties it; relock.log-max-len 0 turns it off)";

/**
 * The reason of `owner`'s loss from LOCK.HISTORY entries (newest first): its newest entry,
 * or a flush or swap (entries without a key, which end every hold) at or after `since`
 * (Unix ms, when the hold was granted).
 */
export function lossReason(entries: LogEntry[], owner: string, since: number, now?: number): LossReason {
  for (const e of entries) {
    if (e.owner === owner || (!e.key && !e.owner && e.time >= since - 1000)) {
      return { cause: e.reason, who: e.who, message: describeLoss(e, now), entry: e };
    }
  }
  return { cause: null, who: null, message: UNKNOWN_LOSS, entry: null };
}

/** An entry in words: `force-released (LOCK.FORCERELEASE) by client 17 (name ops, user admin) 1.2 s ago`. */
export function describeLoss(e: LogEntry, now?: number): string {
  const words: Record<string, string> = {
    expired: "expired on the server",
    forcereleased: "force-released (LOCK.FORCERELEASE)",
    deleted: "deleted (DEL, UNLINK, GETDEL, or the key overwritten by another value)",
    evicted: "evicted by the server (maxmemory)",
    revoked: "revoked (its waiter hung up before the grant reached it)",
    restored: "replaced by RESTORE or COPY ... REPLACE",
    moved: "moved away (RENAME, MOVE or MIGRATE)",
    flushed: "flushed with its database (FLUSHDB or FLUSHALL)",
    swapped: "swapped out with its database (SWAPDB)",
  };
  let what = words[e.reason] ?? (e.reason || "ended");
  if (e.reason === "expired" && e.held !== null) what += `: not renewed in time, after ${e.held / 1000} s held`;
  if (e.who) what += ` by ${describeWho(e.who)}`;
  if (now !== undefined && e.time > 0) what += ` ${(Math.max(0, now - e.time) / 1000).toFixed(1)} s ago`;
  return what;
}

/** One of the hottest keys by total wait time on one server (LOCK.STATS), from an approximate top-k: `waitMsTotal` may be over by up to `error` ms. */
export interface KeyStats {
  server: string;
  key: string;
  waits: number;
  granted: number;
  timeouts: number;
  contended: number;
  waitMsTotal: number;
  error: number;
  waitMsMax: number;
}

export function parseStats(server: string, reply: unknown): KeyStats[] {
  if (!Array.isArray(reply)) return [];
  return reply.map((e) => {
    const m = asMap(e);
    return {
      server,
      key: text(m.get("key")) ?? "",
      waits: int(m.get("waits")),
      granted: int(m.get("granted")),
      timeouts: int(m.get("timeouts")),
      contended: int(m.get("contended")),
      waitMsTotal: int(m.get("wait_ms_total")),
      error: int(m.get("error")),
      waitMsMax: int(m.get("wait_ms_max")),
    };
  });
}

/**
 * A key's Redis Cluster hash slot: CRC16 (XMODEM) of its hash tag, or of the whole key, mod
 * 16384, on the key's UTF-8 bytes (what ioredis sends). The CRC is `cluster-key-slot`'s, the
 * function ioredis itself routes keys with. Its 1.1.1 (the version ioredis pins) is wrong in
 * one case: an empty first tag (`foo{}{bar}`), where Redis hashes the whole key and it goes
 * on to the next `}`; the whole key is then hashed without the tag scan (see wholeKeySlot).
 */
export function keySlot(key: string): number {
  const bytes = Buffer.from(key, "utf8");
  const open = bytes.indexOf(0x7b); // {
  return open >= 0 && bytes[open + 1] === 0x7d ? wholeKeySlot(bytes) : clusterKeySlot(bytes);
}

/**
 * The slot of all of `bytes`, `{` included, from `cluster-key-slot` on inputs without `{`
 * (which it hashes whole): the CRC (zero start, no final xor) is linear in its input, so the
 * CRC of the bytes is the xor of the CRCs of three same-length parts that xor to them: the
 * bytes with every `{` (0x7b) zeroed, and 0x7a and 0x01 (0x7a ^ 0x01 = 0x7b) where a `{` was.
 */
function wholeKeySlot(bytes: Buffer): number {
  const rest = Buffer.from(bytes);
  const high = Buffer.alloc(bytes.length);
  const low = Buffer.alloc(bytes.length);
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] === 0x7b) {
      rest[i] = 0;
      high[i] = 0x7a;
      low[i] = 0x01;
    }
  }
  return clusterKeySlot(rest) ^ clusterKeySlot(high) ^ clusterKeySlot(low);
}

/**
 * The key a relock command is routed by in a Redis Cluster: the first of LOCK.MACQUIRE,
 * LOCK.MRELEASE and LOCK.MRENEW (after their count), the first argument of the other LOCK.*
 * commands, none for LOCK.LOG and LOCK.STATS (a node's own tables) or another command. ioredis
 * knows only the keys of Redis's own commands and sends any other to a master of its choice,
 * which answers MOVED two times in three.
 */
export function routingKey(args: ReadonlyArray<string | number | Buffer>): string | null {
  const name = String(args[0]).toUpperCase();
  if (!name.startsWith("LOCK.") || name === "LOCK.LOG" || name === "LOCK.STATS") return null;
  const key = args[name === "LOCK.MACQUIRE" || name === "LOCK.MRELEASE" || name === "LOCK.MRENEW" ? 2 : 1];
  return typeof key === "string" ? key : null;
}

/** The most keys one LOCK.MACQUIRE takes. */
export const MAX_KEYS = 256;

/**
 * A key as sent: a string, or a Buffer holding UTF-8 (decoded). Anything else is a TypeError
 * at once: JavaScript would turn `{id: 1}` into the key "[object Object]" and `42` into "42",
 * so two different values could lock one key.
 */
export function checkKey(key: unknown): string {
  if (typeof key === "string") return key;
  if (Buffer.isBuffer(key)) {
    const s = key.toString("utf8");
    if (!Buffer.from(s, "utf8").equals(key)) throw new TypeError("a Buffer key must hold UTF-8 (relock keys are text)");
    return s;
  }
  const what = key === null ? "null" : Array.isArray(key) ? "an array" : typeof key;
  throw new TypeError(`a key must be a string or a Buffer, not ${what}`);
}

/** The keys of a group: 1 to 256 distinct strings, in the caller's order. */
export function checkKeys(keys: unknown): string[] {
  if (!Array.isArray(keys)) throw new InvalidArgumentError("keys must be an array of keys (use acquire() for one)");
  if (keys.length < 1 || keys.length > MAX_KEYS) throw new InvalidArgumentError(`a group takes 1 to ${MAX_KEYS} keys, not ${keys.length}`);
  if (!keys.every((k) => typeof k === "string" || Buffer.isBuffer(k))) throw new TypeError("every key of a group must be a string or a Buffer");
  keys = keys.map(checkKey);
  const seen = new Set<string>();
  for (const k of keys as string[]) {
    if (seen.has(k)) throw new InvalidArgumentError(`key ${JSON.stringify(k)} is named twice in the group`);
    seen.add(k);
  }
  return [...(keys as string[])];
}

/**
 * The order in which a group's keys are waited for, one by one: by their UTF-8 bytes, the
 * same in every relock client, so that overlapping groups never wait for each other in a
 * circle (no deadlock).
 */
export function waitOrder(keys: readonly string[]): string[] {
  return [...keys].sort((a, b) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8")));
}

/** LOCK.MACQUIRE's reply as each key's token, null when it granted nothing. */
export function groupTokens(keys: readonly string[], reply: unknown): Record<string, number> | null {
  if (reply === null || reply === undefined) return null;
  if (!Array.isArray(reply) || reply.length !== keys.length) {
    throw new BadReply(`LOCK.MACQUIRE answered ${Array.isArray(reply) ? reply.length : typeof reply} for ${keys.length} keys`);
  }
  const out: Record<string, number> = {};
  keys.forEach((k, i) => (out[k] = Number(reply[i])));
  return out;
}

/** LOCK.INFO on one server. For a shared key `owner`, `token` and `count` are null. */
export interface LockInfo {
  server: string;
  owner: string | null;
  token: number | null;
  count: number | null;
  /** ms left (of the latest lease for a shared key). */
  ttl: number;
  waiters: number;
  mode: string;
  holders: number;
  /** 1 for exclusive, n for a semaphore, 0 for a read lock. */
  limit: number;
  /** Permits a semaphore has free (0 for an exclusive key and a read lock). */
  permitsFree: number;
}

/** One holder of a key on one server (LOCK.HOLDERS). */
export interface Holder {
  server: string;
  owner: string;
  token: number;
  count: number;
  ttl: number;
  permits: number;
}

/** One client queued for a key on one server (LOCK.WAITERS), in queue order. */
export interface Waiter {
  server: string;
  owner: string;
  mode: string;
  limit: number;
  permits: number;
  client: number;
  waited: number;
  timeout: number | null;
  ttl: number;
}

export function parseInfo(server: string, reply: unknown): LockInfo | null {
  if (reply === null || reply === undefined) return null;
  const m = asMap(reply);
  const opt = (k: string): number | null => (m.get(k) === null || m.get(k) === undefined ? null : Number(m.get(k)));
  return {
    server,
    owner: text(m.get("owner")),
    token: opt("token"),
    count: opt("count"),
    ttl: int(m.get("ttl")),
    waiters: int(m.get("waiters")),
    mode: text(m.get("mode")) ?? "exclusive",
    holders: int(m.get("holders"), 1),
    limit: int(m.get("limit"), 1),
    permitsFree: int(m.get("permits_free")),
  };
}

export function parseHolders(server: string, reply: unknown): Holder[] {
  if (!Array.isArray(reply)) return [];
  return reply.map((e) => {
    const m = asMap(e);
    return {
      server,
      owner: text(m.get("owner")) ?? "",
      token: int(m.get("token")),
      count: int(m.get("count"), 1),
      ttl: int(m.get("ttl")),
      permits: int(m.get("permits"), 1),
    };
  });
}

export function parseWaiters(server: string, reply: unknown): Waiter[] {
  if (!Array.isArray(reply)) return [];
  return reply.map((e) => {
    const m = asMap(e);
    const timeout = int(m.get("timeout"), -1);
    return {
      server,
      owner: text(m.get("owner")) ?? "",
      mode: text(m.get("mode")) ?? "exclusive",
      limit: int(m.get("limit"), 1),
      permits: int(m.get("permits"), 1),
      client: int(m.get("client")),
      waited: int(m.get("waited")),
      timeout: timeout < 0 ? null : timeout,
      ttl: int(m.get("ttl")),
    };
  });
}

// --- failures -----------------------------------------------------------------------------

const TRANSIENT_CODES = new Set([
  "BUSY", "MISCONF", "NOREPLICAS", "UNBLOCKED", "NOTREADY", "CLUSTERDOWN", "MASTERDOWN",
  "LOADING", "READONLY", "OOM", "TRYAGAIN", "MOVED", "ASK",
]);

/** Why one server did not do what was asked. */
export interface Failure {
  message: string;
  refused?: boolean;
  permanent?: boolean;
  timeout?: boolean;
  otherLimit?: number;
  otherMode?: boolean;
  otherPermits?: boolean;
  /**
   * The server is in its restart grace (TRYAGAIN): it grants nothing new yet. Neither a
   * refusal nor an error: the request is retried, and in a Redlock round it is a no-vote.
   */
  grace?: boolean;
  /**
   * The server refused the ttl asked for (`ttl_ms exceeds relock.restart-grace-ms`) and
   * changed nothing: permanent for that ttl, but a hold it was asked to renew is still held.
   */
  badTtl?: boolean;
  /**
   * Fewer replicas than `replicaAcks` acknowledged the write (or WAIT was refused); with
   * `undone`, its undo (a grant taken back) was answered: nothing is left there and nothing is
   * under way, so no give-back follows (one repeated later could take the same owner's next
   * grant).
   */
  unacked?: boolean;
  undone?: boolean;
}

export const refusal = (): Failure => ({
  message: "not granted (held by another owner or not held by us)",
  refused: true,
});

export class TimeoutFailure extends Error {}

/**
 * The client given to Relock has ended (`quit()`, `disconnect()`, or its retryStrategy gave
 * up): permanent until the application connects it again. Never retried as transient: an
 * acquisition would otherwise go on on a connection of its own and grant a lock that no
 * renewal or release can reach.
 */
export class ClientClosed extends Error {}

/** A reply relock cannot read (a server that is not what it seems): permanent, never retried. */
export class BadReply extends Error {}

export function errorText(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return msg.startsWith("ERR ") ? msg.slice(4) : msg;
}

/**
 * The one place that decides whether a failure is permanent (see NodeFailure in
 * relock-client): refused logins, permissions, WRONGTYPE, unknown commands and refused
 * arguments are; timeouts, lost connections and a busy, loading or failing-over server are not.
 * `MOVED` and `ASK` are passing only through an ioredis `Cluster` (`cluster`), which follows
 * them itself; a plain client of a cluster node gets them for every key of another node's
 * slots, for ever: permanent, with what to do.
 */
export function classify(e: unknown, cluster = true): Failure {
  if (e instanceof TimeoutFailure) return { message: e.message, timeout: true };
  if (e instanceof BadReply) return { message: `a reply relock cannot read: ${e.message}`, permanent: true };
  if (e instanceof ClientClosed) return { message: e.message, permanent: true };
  const isReply = e instanceof Error && e.name === "ReplyError";
  let msg = errorText(e);
  if (isReply && msg.startsWith("TRYAGAIN") && msg.includes("restart grace")) {
    return { message: `in its restart grace, granting nothing new yet (${msg.slice("TRYAGAIN ".length)})`, grace: true };
  }
  if (!isReply) return { message: msg };
  if (msg.startsWith("lock is held with other permits")) {
    return { message: "the owner holds the lock there with another number of permits", permanent: true, otherPermits: true };
  }
  // The text goes on to name LOCK.DOWNGRADE since the module has one.
  if (msg.startsWith("lock is held in another mode")) {
    return {
      message: "the owner holds the lock in the other mode there (no upgrade or downgrade)",
      permanent: true,
      otherMode: true,
    };
  }
  const m = /^lock has another limit \((\d+)\)$/.exec(msg);
  if (m) {
    const n = Number(m[1]);
    return { message: `the lock has another limit there (${n}; 0 means none)`, permanent: true, otherLimit: n };
  }
  if (msg.startsWith("ttl_ms exceeds")) return { message: msg, permanent: true, badTtl: true };
  const code = msg.split(" ", 1)[0] ?? "";
  if (!cluster && (code === "MOVED" || code === "ASK")) {
    return {
      message: `${msg} (a Redis Cluster node: give relock an ioredis Cluster, new Redis.Cluster([...]), not a client of one node)`,
      permanent: true,
    };
  }
  if (code === "NOPERM") msg += " (the user's ACL does not allow it)";
  if (TRANSIENT_CODES.has(code) || msg.startsWith("max number of clients reached")) return { message: msg };
  if (msg.startsWith("unknown command") && /LOCK\.(WAITERS|HISTORY|LOG)/i.test(msg)) {
    msg += " (this relock module is older than that command)";
  } else if (msg.startsWith("unknown command") && msg.toUpperCase().includes("LOCK.")) {
    msg += " (is the relock module loaded on this server?)";
  }
  if (code === "NOAUTH" || code === "WRONGPASS") msg += " (check the user and password)";
  return { message: msg, permanent: true };
}

export function isUnknownCommand(e: unknown): boolean {
  return errorText(e).startsWith("unknown command");
}

// --- the round ----------------------------------------------------------------------------

export const quorum = (n: number): number => Math.floor(n / 2) + 1;

export type Progress = "pending" | "won" | "lost";

/** One Redlock round: the replies, fed in as they come, decide whether a quorum is won or lost. */
export class Round<T> {
  readonly agreed = new Map<number, T>();
  readonly answered = new Set<number>();
  readonly failures: Array<[number, Failure]> = [];
  elapsed = 0;

  constructor(
    readonly names: readonly string[],
    readonly started: number,
    readonly untilAll = false,
  ) {}

  get n(): number {
    return this.names.length;
  }

  progress(): Progress {
    if (this.untilAll && this.answered.size < this.n) return "pending";
    if (this.agreed.size >= quorum(this.n)) return "won";
    if (this.failures.length + quorum(this.n) > this.n) return "lost";
    return "pending";
  }

  /** Server `i`'s answer: a value when it agreed, null for a refusal, or a failure. */
  onReply(i: number, value: T | null, failure?: Failure): Progress {
    const p = this.progress();
    if (p !== "pending" || this.answered.has(i) || i < 0 || i >= this.n) return p;
    this.answered.add(i);
    if (failure) this.failures.push([i, failure]);
    else if (value === null || value === undefined) this.failures.push([i, refusal()]);
    else this.agreed.set(i, value);
    return this.progress();
  }

  /**
   * A grant of server `i` made after the round was decided (a won wait topped up on the
   * servers whose waits were cut): kept with the others, so that the hold is renewed,
   * released and fenced with every server that granted.
   */
  addGrant(i: number, value: T): void {
    if (i < 0 || i >= this.n) return;
    this.answered.add(i);
    this.agreed.set(i, value);
  }

  finish(at: number): this {
    this.elapsed = Math.max(0, at - this.started);
    return this;
  }

  won(): boolean {
    return this.agreed.size >= quorum(this.n);
  }

  inGrace(): number {
    return this.failures.filter(([, f]) => f.grace).length;
  }

  refused(): number {
    return this.failures.filter(([, f]) => f.refused).length;
  }

  permanent(): number {
    return this.failures.filter(([, f]) => f.permanent).length;
  }

  someFailed(): boolean {
    return this.refused() < this.failures.length;
  }

  /** Whether a server refused the ttl itself (changing nothing). */
  badTtl(): boolean {
    return this.failures.some(([, f]) => f.badTtl);
  }

  permanentlyFailed(): boolean {
    return this.permanent() + quorum(this.n) > this.n;
  }

  /**
   * Per server, whether it failed in a way that says nothing of what it did (no reply in
   * time, a lost connection): neither a refusal nor a permanent error.
   */
  unanswered(): boolean[] {
    const out = this.names.map(() => false);
    for (const [i, f] of this.failures) out[i] = !f.refused && !f.permanent;
    return out;
  }

  agreedBy(): boolean[] {
    return this.names.map((_, i) => this.agreed.has(i));
  }

  mayHold(): boolean[] {
    const out = this.names.map(() => true);
    for (const [i, f] of this.failures) if (f.permanent) out[i] = false;
    return out;
  }

  validUntil(ttl: number): number | null {
    if (!this.won()) return null;
    const v = validity(ttl, this.elapsed);
    return v === null ? null : this.started + v;
  }

  /**
   * A quorum granted, but the round took so long (a wait) that what it leaves of the ttl is
   * under two thirds: the ttl ran from grants the client did not see, so the validity is
   * measured again with a renewal round.
   */
  grantedLate(ttl: number): boolean {
    const until = this.validUntil(ttl);
    return this.won() && (until === null || until - this.started < (ttl * 2) / 3);
  }

  /**
   * Where a failed acquisition is released: `now`, the servers that granted; `later` (in the
   * background, now and once more a little after), those where a grant may still land: every
   * server that neither granted, refused, nor failed permanently (a request still under way
   * when the round was decided, or one that timed out), but for an unacknowledged grant already taken back (`undone`).
   */
  giveBack(): { now: boolean[]; later: boolean[] } {
    const now = this.agreedBy();
    const refused = new Set(this.failures.filter(([, f]) => f.refused).map(([i]) => i));
    const undone = new Set(this.failures.filter(([, f]) => f.undone).map(([i]) => i));
    const later = this.mayHold().map((m, i) => m && !now[i] && !refused.has(i) && !undone.has(i));
    return { now, later };
  }

  /**
   * What an acquisition round without validity means, once its grants are given back: the
   * error to throw, or null to try again after a pause. Permanent failures that leave no
   * quorum end it at once; so does the deadline; so does a single server that only refused a
   * bounded request (`bounded`: a try or a wait with a limit, which the server itself timed
   * out). A wait without a limit, or a round some server failed, goes on.
   */
  afterFailed(key: string, ttl: number, wait: number | null, deadlinePassed: boolean, bounded: boolean): RelockError | null {
    if (this.permanentlyFailed()) return this.permanentError(key);
    const failure = this.acquireError(key, ttl, wait);
    if (deadlinePassed) return failure;
    if (this.n === 1 && bounded && !this.someFailed()) return failure;
    return null;
  }

  describe(keep?: (f: Failure) => boolean): string {
    const parts = this.failures.filter(([, f]) => !keep || keep(f)).map(([i, f]) => `${this.names[i]}: ${f.message}`);
    return parts.length ? parts.join("; ") : "no server failed";
  }

  servers(keep?: (f: Failure) => boolean): string[] {
    return this.failures.filter(([, f]) => !keep || keep(f)).map(([i]) => this.names[i] ?? "");
  }

  permanentError(key: string): RelockError {
    for (const [i, f] of this.failures) {
      const server = this.names[i] ?? "";
      if (f.otherLimit !== undefined) {
        return new OtherLimitError(
          `lock ${JSON.stringify(key)} on ${server}: it has another limit there (${f.otherLimit}; 0 means none)`,
          f.otherLimit,
          { key, servers: [server] },
        );
      }
      if (f.otherPermits) {
        return new OtherPermitsError(
          `lock ${JSON.stringify(key)} on ${server}: the owner holds it with another number of permits (a hold keeps the permits it was granted)`,
          { key, servers: [server] },
        );
      }
      if (f.otherMode) {
        return new OtherModeError(
          `lock ${JSON.stringify(key)} on ${server}: the owner holds it in the other mode (no upgrade or downgrade)`,
          { key, servers: [server] },
        );
      }
    }
    const perm = (f: Failure): boolean => !!f.permanent;
    return new ServerError(`lock ${JSON.stringify(key)}: ${this.describe(perm)} (retrying cannot help)`, {
      key,
      servers: this.servers(perm),
      retryable: false,
    });
  }

  acquireError(key: string, ttl: number, waited: number | null): RelockError {
    const k = JSON.stringify(key);
    if (this.won()) {
      return new NotAcquiredError(`lock ${k}: quorum reached after ${this.elapsed.toFixed(1)} ms, leaving no validity of the ${ttl} ms ttl`, { key });
    }
    if (this.permanentlyFailed()) return this.permanentError(key);
    if (this.inGrace() > 0 && this.agreed.size === 0 && this.inGrace() + this.refused() === this.failures.length) {
      return new NotAcquiredError(`lock ${k}: not granted, ${this.describe((f) => !!f.grace)} (retry: the grace ends by itself)`, {
        key,
        servers: this.servers((f) => !!f.grace),
      });
    }
    if (this.n === 1 && !this.someFailed()) {
      const within = waited ? ` within ${waited} ms` : "";
      return new NotAcquiredError(`lock ${k} is held by another owner${within}`, { key });
    }
    if (waited && !this.someFailed()) return new NotAcquiredError(`lock ${k}: not acquired within ${waited} ms`, { key });
    if (this.n === 1) {
      // One server, one vote: "0 of 1 servers granted" says nothing its own failure does not.
      return new NotAcquiredError(`lock ${k}: not acquired (${this.describe()})`, { key, servers: this.servers((f) => !f.refused) });
    }
    return new NotAcquiredError(
      `lock ${k}: no quorum, ${this.agreed.size} of ${this.n} servers granted, ${quorum(this.n)} needed (${this.describe()})`,
      { key, servers: this.servers((f) => !f.refused) },
    );
  }

  /**
   * A renewal whose ttl servers refused (`ttl_ms exceeds relock.restart-grace-ms`): they
   * changed nothing, so the hold is kept with its ttl (`kept` ms); not retryable as asked.
   */
  badTtlError(key: string, ttl: number, kept: number): ServerError {
    const bad = (f: Failure): boolean => !!f.badTtl;
    return new ServerError(
      `lock ${JSON.stringify(key)}: renewal to a ttl of ${ttl} ms refused (${this.describe(bad)}); the hold is kept, ` +
        `with its ttl of ${kept} ms (retrying cannot help: ask for a shorter ttl)`,
      { key, servers: this.servers(bad), retryable: false },
    );
  }

  /**
   * What a release that no quorum made means when errors retrying cannot fix (`NOPERM`,
   * `WRONGTYPE`, the module gone) alone leave no quorum, judged as in every round: a
   * `ServerError` naming them, since the lock stays held there until its ttl runs out; null
   * otherwise (the servers said it was no longer held, or a minority failed for good while
   * others did not answer: a retry there may still release it).
   */
  releaseError(key: string): ServerError | null {
    if (this.won() || !this.permanentlyFailed()) return null;
    const perm = (f: Failure): boolean => !!f.permanent;
    return new ServerError(
      `lock ${JSON.stringify(key)}: release refused (${this.describe(perm)}); the lock stays held there until its ttl runs out (retrying cannot help)`,
      { key, servers: this.servers(perm), retryable: false },
    );
  }

  /** After a renewal without validity: "lost" when no quorum can renew any more, else "retry". */
  renewVerdict(): "lost" | "retry" {
    if (!this.won() && (this.refused() > 0 || this.permanent() > 0) && this.refused() + this.permanent() + quorum(this.n) > this.n) {
      return "lost";
    }
    return "retry";
  }
}

export function lostError(key: string, reason: string, loss?: LossReason | null, servers: string[] = []): LockLostError {
  return new LockLostError(`lock ${JSON.stringify(key)} was lost: ${reason}`, reason, loss ?? undefined, { key, servers });
}

export function serverError(key: string | undefined, server: string, e: unknown): ServerError {
  const f = classify(e);
  const about = key === undefined ? server : `lock ${JSON.stringify(key)} on ${server}`;
  return new ServerError(`${about}: ${f.message}${f.permanent ? " (retrying cannot help)" : ""}`, {
    key,
    servers: [server],
    retryable: !f.permanent,
    cause: e,
  });
}

// --- elections ----------------------------------------------------------------------------

/**
 * How long one LOCK.OBSERVE of `observe()` blocks at most, in ms, unless the client's
 * `socketTimeout` or `commandTimeout` is shorter (then half of the shorter): a finite wait,
 * asked again, that no driver timeout cuts.
 */
export const OBSERVE_EVERY = 5_000;

/** A candidate's owner: `<value>/<32 hex random>`, the value cut to fit 256 bytes (never the random part). */
export function candidateOwner(value: unknown): string {
  if (typeof value !== "string") throw new InvalidArgumentError(`a candidate's value must be a string, not ${typeof value}`);
  const rand = randomBytes(16).toString("hex");
  const room = MAX_OWNER - rand.length - 1;
  // Whole characters only (code points), as many as fit.
  let cut = "";
  let bytes = 0;
  for (const ch of value) {
    bytes += Buffer.byteLength(ch, "utf8");
    if (bytes > room) break;
    cut += ch;
  }
  return `${cut}/${rand}`;
}

/** A candidate's proclaimed value: its owner without the last `/`-separated part. */
export function proclaimed(owner: string): string {
  const i = owner.lastIndexOf("/");
  return i < 0 ? "" : owner.slice(0, i);
}

/** The leader of an election (`leader()`, `observe()`). */
export interface Leader {
  /** The proclaimed value (the owner without its last `/`-part). */
  value: string;
  /** The term: the leadership's fencing token. */
  term: number;
  owner: string;
  /** ms of lease left. */
  ttl: number;
  /** Candidates queued behind the leader. */
  waiters: number;
  server: string;
}

/** One item of `observe()`: the leader after a change (null: nobody leads). */
export interface LeaderChange {
  leader: Leader | null;
  /** The term is lower than the last one this observer saw: the store lost history (a restart without persistence, a failover to a replica that missed the last grant). */
  termRegressed: boolean;
}

export function checkElection(key: string, servers: number, what: string): void {
  if (servers > 1) {
    throw new InvalidArgumentError(
      `${what} ${JSON.stringify(key)}: elections run on one master or a cluster, not over ${servers} Redlock masters ` +
        "(a term must come from one sequence, and FIFO order does not compose across independent queues)",
    );
  }
}

export function sharedElection(key: string, server: string): ServerError {
  return new ServerError(`lock ${JSON.stringify(key)} is shared on ${server}: an election is an exclusive lock (its holder is the leader)`, {
    key,
    servers: [server],
    retryable: false,
  });
}

/** LOCK.INFO's (or LOCK.OBSERVE's) reply as the leader; a shared key is not an election. */
export function parseLeader(key: string, server: string, reply: unknown): Leader | null {
  const info = parseInfo(server, reply);
  if (info === null) return null;
  if (info.mode !== "exclusive" || info.owner === null || info.token === null) throw sharedElection(key, server);
  return { value: proclaimed(info.owner), term: info.token, owner: info.owner, ttl: info.ttl, waiters: info.waiters, server };
}

/** How long one LOCK.OBSERVE may block: OBSERVE_EVERY, or half the shortest driver timeout set. */
export function observeEvery(...timeouts: Array<number | undefined | null>): number {
  let every = OBSERVE_EVERY;
  for (const t of timeouts) if (typeof t === "number" && t > 0) every = Math.min(every, t / 2);
  return Math.max(10, Math.floor(every));
}

/**
 * What an observer knows: the token it last saw (`known`, sent with the next LOCK.OBSERVE; 0 =
 * no leader) and the last term. `see` turns a reply into the change to report, or null when
 * nothing changed (a timeout, a wait cut and asked again).
 */
export class Observation {
  known = 0;
  lastTerm: number | null = null;
  started = false;

  see(leader: Leader | null): LeaderChange | null {
    const token = leader === null ? 0 : leader.term;
    if (this.started && token === this.known) return null;
    this.started = true;
    this.known = token;
    const termRegressed = leader !== null && this.lastTerm !== null && leader.term < this.lastTerm;
    if (leader !== null) this.lastTerm = leader.term;
    return { leader, termRegressed };
  }
}

export function checkFenced(key: string, servers: number): void {
  if (servers > 1) {
    throw new InvalidArgumentError(
      `lock ${JSON.stringify(key)}: fenced() runs on one master or a cluster, not on a Redlock hold (${servers} masters): ` +
        "each master has its own tokens, so no one token fences them all",
    );
  }
}

/**
 * A command sent once (LOCK.FENCED, LOCK.FORCERELEASE) whose reply never came: no reply in
 * time, or its connection ended first. The server may have run it; it is never sent again (the
 * send-once rule of spec/client-cases/README.md). `why` says which.
 */
export class Unanswered extends Error {
  constructor(
    readonly why: string,
    readonly failure: unknown,
  ) {
    super(why);
  }
}

/** What ioredis says when it never wrote the command (nothing was sent, so nothing ran). */
const NOT_SENT = /Stream isn't writeable|enableOfflineQueue|Too many Cluster redirections|Failed to refresh slots cache|None of startup nodes is available|Cluster isn't ready/;

/**
 * `e`, the failure of a command sent once, as `Unanswered` when the command may have run: no
 * reply in time, or any failure other than an error reply or one ioredis raises before it
 * writes (a closed connection, a reset, a broken pipe); null: `e` as it is.
 */
export function unanswered(e: unknown): Unanswered | null {
  if (e instanceof TimeoutFailure) return new Unanswered("got no reply in time", e);
  if (!(e instanceof Error) || e.name === "ReplyError" || e instanceof RelockError || NOT_SENT.test(e.message)) return null;
  return new Unanswered(`lost its connection before its reply (${errorText(e)})`, e);
}

/** A command sent once (a fenced write, a force-release) whose reply was lost: it may have run, and was not sent again. */
export function fencedUnanswered(key: string, server: string, e: Unanswered, command = "LOCK.FENCED"): ServerError {
  return new ServerError(`lock ${JSON.stringify(key)} on ${server}: ${command} ${e.why} (it may have run; it was not sent again)`, {
    key,
    servers: [server],
    cause: e.failure,
  });
}

/** A failed LOCK.FENCED: `StaleTokenError` for a `FENCED` error, else as every command's. */
export function fencedError(key: string, server: string, e: unknown): RelockError {
  const msg = errorText(e);
  if (e instanceof Error && e.name === "ReplyError" && msg.startsWith("FENCED")) {
    const m = /^FENCED stale token (\d+), current (\S+)/.exec(msg);
    return new StaleTokenError(`lock ${JSON.stringify(key)} on ${server}: ${msg} (the hold is gone: nothing ran)`, m ? Number(m[1]) : 0, m ? m[2] : undefined, {
      key,
      servers: [server],
      cause: e,
    });
  }
  return serverError(key, server, e);
}
