/**
 * What needs no I/O: defaults and limits, owners, the Redlock round (who agreed, whether a
 * quorum is won or lost, the validity left), the classification of failures into transient
 * and permanent, and the decoding of replies under RESP2 and RESP3. It follows
 * relock-client (client/src/round.rs, validity.rs, limits.rs, error.rs) rule for rule.
 */
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

import {
  InvalidArgumentError,
  LockLostError,
  NotAcquiredError,
  OtherLimitError,
  OtherModeError,
  RelockError,
  ServerError,
} from "./errors";

/** Default lease: 30 s (relock-client's and lockctl's). */
export const DEFAULT_TTL = 30_000;
/** How long one server may take to answer one command: 100 ms. */
export const DEFAULT_NODE_TIMEOUT = 100;
/** The mean pause between two Redlock rounds of a wait (drawn from half to 1.5 times it). */
export const DEFAULT_RETRY_DELAY = 200;
/** How long a Redlock wait keeps a minority of grants while it waits for a quorum. */
export const DEFAULT_MAX_PARTIAL_HOLD = 500;
/** The largest ttl_ms and timeout_ms the LOCK.* commands accept. */
export const MAX_MS = 1_000_000_000_000;
/** The largest LIMIT the module accepts. */
export const MAX_LIMIT = 1_000_000;
const MAX_OWNER = 256;

export const now = (): number => performance.now();

export function checkTtl(ttl: number): number {
  const ms = Math.trunc(ttl);
  if (!Number.isFinite(ttl) || ms < 1 || ms > MAX_MS) {
    throw new InvalidArgumentError(`invalid ttl ${ttl} (must be 1 ms to 10^12 ms)`);
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

export function modeArgs(shared: boolean, limit: number | undefined): string[] {
  if (limit !== undefined) return ["SHARED", "LIMIT", String(limit)];
  return shared ? ["SHARED"] : [];
}

export function checkMode(limit: number | undefined, masters: number): void {
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

/** ttl - elapsed - drift, or null when nothing is left. */
export function validity(ttl: number, elapsed: number): number | null {
  const left = ttl - Math.max(0, elapsed) - drift(ttl);
  return left > 0 ? left : null;
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

const int = (v: unknown, dflt = 0): number => (v === null || v === undefined ? dflt : Number(v));

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
}

/** One holder of a key on one server (LOCK.HOLDERS). */
export interface Holder {
  server: string;
  owner: string;
  token: number;
  count: number;
  ttl: number;
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

/** The reason of `owner`'s newest entry in a LOCK.HISTORY reply. */
export function parseHistory(reply: unknown, owner: string): string | null {
  if (!Array.isArray(reply)) return null;
  for (const e of reply) {
    const m = asMap(e);
    if (text(m.get("owner")) === owner) return text(m.get("reason"));
  }
  return null;
}

export function describeCause(cause: string): string {
  const words: Record<string, string> = {
    expired: "its lease ran out on the server",
    forcereleased: "an operator broke it (LOCK.FORCERELEASE)",
    deleted: "its key was deleted or overwritten",
    evicted: "the server evicted its key (maxmemory)",
    revoked: "the grant was revoked",
    restored: "its key was replaced by RESTORE or COPY",
    moved: "its key was renamed or moved",
    flushed: "the database was flushed",
    swapped: "the database was swapped",
  };
  return words[cause] ?? cause;
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
}

export const refusal = (): Failure => ({
  message: "not granted (held by another owner or not held by us)",
  refused: true,
});

export class TimeoutFailure extends Error {}

export function errorText(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return msg.startsWith("ERR ") ? msg.slice(4) : msg;
}

/**
 * The one place that decides whether a failure is permanent (see NodeFailure in
 * relock-client): refused logins, permissions, WRONGTYPE, unknown commands and refused
 * arguments are; timeouts, lost connections and a busy, loading or failing-over server are not.
 */
export function classify(e: unknown): Failure {
  if (e instanceof TimeoutFailure) return { message: e.message, timeout: true };
  const isReply = e instanceof Error && e.name === "ReplyError";
  let msg = errorText(e);
  if (!isReply) return { message: msg };
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
  const code = msg.split(" ", 1)[0] ?? "";
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

  finish(at: number): this {
    this.elapsed = Math.max(0, at - this.started);
    return this;
  }

  won(): boolean {
    return this.agreed.size >= quorum(this.n);
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

  permanentlyFailed(): boolean {
    return this.permanent() + quorum(this.n) > this.n;
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
   * when the round was decided, or one that timed out).
   */
  giveBack(): { now: boolean[]; later: boolean[] } {
    const now = this.agreedBy();
    const refused = new Set(this.failures.filter(([, f]) => f.refused).map(([i]) => i));
    const later = this.mayHold().map((m, i) => m && !now[i] && !refused.has(i));
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
    if (this.n === 1 && !this.someFailed()) {
      const within = waited ? ` within ${waited} ms` : "";
      return new NotAcquiredError(`lock ${k} is held by another owner${within}`, { key });
    }
    if (waited && !this.someFailed()) return new NotAcquiredError(`lock ${k}: not acquired within ${waited} ms`, { key });
    return new NotAcquiredError(
      `lock ${k}: no quorum, ${this.agreed.size} of ${this.n} servers granted, ${quorum(this.n)} needed (${this.describe()})`,
      { key, servers: this.servers((f) => !f.refused) },
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

export function lostError(key: string, reason: string, cause?: string | null, servers: string[] = []): LockLostError {
  return new LockLostError(`lock ${JSON.stringify(key)} was lost: ${reason}`, reason, cause ?? undefined, { key, servers });
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
