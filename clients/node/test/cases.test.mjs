// The client cases every relock client runs (spec/client-cases/, see its README.md): the round's
// verdicts, the validity arithmetic, the classification of failures and the decoding of the read
// commands' replies under RESP2 and RESP3, run against this package's rules (src/core.ts).
// relock-client and the Python package run the same files, and the reply samples are checked
// against the real module by the repository's tests/client_cases.rs.
//
// A case whose `diverges` names `node` is one this package is known to get wrong: it must still
// fail here (so that fixing it means removing the mark).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const core = require("../dist/core.js");
const { OtherLimitError, OtherModeError, OtherPermitsError } = require("../dist/index.js");
const { ReplyError } = require("ioredis");

const CASES = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "spec", "client-cases");

function load(name) {
  const cases = JSON.parse(readFileSync(join(CASES, name), "utf8")).cases;
  assert.ok(cases.length > 0, `${name}: no cases`);
  return cases;
}

/** Runs `check`: it must pass, unless the case diverges for Node, then it must fail. */
function runCase(c, check) {
  const why = c.diverges?.node;
  if (why === undefined) return check(c);
  let passed = false;
  try {
    check(c);
    passed = true;
  } catch (e) {
    if (!(e instanceof assert.AssertionError)) throw e;
  }
  assert.ok(!passed, `${c.name}: passes now; remove its diverges.node mark (${why})`);
}

// --- failures -------------------------------------------------------------------------------

/** A failure as ioredis rejects with it: `-TEXT` an error reply off the wire, `timeout`, `down`. */
function error(reply) {
  if (reply === "timeout") return new core.TimeoutFailure("no reply within 100 ms (LOCK.ACQUIRE)");
  if (reply === "down") return Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6379"), { code: "ECONNREFUSED" });
  assert.ok(reply.startsWith("-"), reply);
  return new ReplyError(reply.slice(1));
}

/** Classified as a client of plain servers (not an ioredis Cluster) classifies it. */
const failure = (reply) => core.classify(error(reply), false);

function classified(f) {
  const kind =
    f.otherLimit !== undefined ? "other_limit"
    : f.otherMode ? "other_mode"
    : f.otherPermits ? "other_permits"
    : f.grace ? "grace"
    : f.badTtl ? "bad_ttl"
    : null;
  const out = { class: f.permanent ? "permanent" : "transient", kind };
  if (f.otherLimit !== undefined) out.limit = f.otherLimit;
  return out;
}

describe("errors.json", () => {
  for (const c of load("errors.json")) {
    test(c.name, () => runCase(c, (c) => assert.deepEqual(classified(failure(c.reply)), c.expect)));
  }
});

// --- validity -------------------------------------------------------------------------------

describe("validity.json", () => {
  for (const c of load("validity.json")) {
    test(c.name, () =>
      runCase(c, (c) => {
        assert.equal(Math.round(core.drift(c.ttl_ms) * 1000), c.drift_us, "drift_us");
        const v = core.validity(c.ttl_ms, c.elapsed_us / 1000);
        assert.equal(v === null ? null : Math.round(v * 1000), c.validity_us, "validity_us");
      }),
    );
  }
});

// --- the round ------------------------------------------------------------------------------

/** The case's round, started at 0, fed its replies, finished `elapsed_ms` later; with the progress after each. */
function roundOf(c) {
  const rnd = new core.Round(
    Array.from({ length: c.masters }, (_, i) => `m${i}`),
    0,
    c.until === "all",
  );
  const progress = c.replies.map(([i, r]) => {
    if (r === "nil") return rnd.onReply(i, null);
    if (r.startsWith("grant ")) return rnd.onReply(i, Number(r.slice("grant ".length)));
    return rnd.onReply(i, null, failure(r));
  });
  return [rnd.finish(c.elapsed_ms ?? 5), progress];
}

function verdict(e) {
  if (e instanceof OtherLimitError) return "other_limit";
  if (e instanceof OtherModeError) return "other_mode";
  if (e instanceof OtherPermitsError) return "other_permits";
  return e.retryable ? "not_acquired" : "permanent";
}

function checkRound(c) {
  const want = c.expect;
  const ttl = c.ttl_ms ?? 10_000;
  const [rnd, progress] = roundOf(c);
  if ("progress" in want) assert.deepEqual(progress, want.progress, "progress");
  if ("tokens" in want) {
    const tokens = Array.from({ length: rnd.n }, (_, i) => (rnd.agreed.has(i) ? rnd.agreed.get(i) : null));
    assert.deepEqual(tokens, want.tokens, "tokens");
  }
  if ("may_hold" in want) assert.deepEqual(rnd.mayHold(), want.may_hold, "may_hold");
  if ("give_back_later" in want) {
    const { now, later } = rnd.giveBack();
    if ("tokens" in want) assert.deepEqual(now, want.tokens.map((t) => t !== null), "give back now");
    assert.deepEqual(later, want.give_back_later, "give_back_later");
  }
  if ("validity_ms" in want) {
    const until = rnd.validUntil(ttl);
    const left = until === null ? null : until - rnd.started;
    if (left === null || want.validity_ms === null) assert.equal(left, want.validity_ms, "validity_ms");
    else assert.ok(Math.abs(left - want.validity_ms) < 1e-6, `validity_ms ${left}`);
  }
  if ("acquire" in want) {
    const got = rnd.validUntil(ttl) !== null ? "acquired" : verdict(rnd.acquireError("k", ttl, null));
    assert.equal(got, want.acquire, "acquire");
  }
  if ("renew" in want) {
    const got = rnd.validUntil(ttl) !== null ? "renewed" : rnd.badTtl() ? "kept" : rnd.renewVerdict();
    assert.equal(got, want.renew, "renew");
  }
  if ("release" in want) {
    // release() resolves true, throws a permanent ServerError, or resolves false, which does
    // not tell a lost lock from a release without a quorum.
    const got = rnd.won() ? "released" : rnd.releaseError("k") !== null ? "permanent" : "lost or no_quorum";
    const ok = got === want.release || (got === "lost or no_quorum" && ["lost", "no_quorum"].includes(want.release));
    assert.ok(ok, `release: got ${got}, want ${want.release}`);
  }
  for (const [field, passed] of [["wait", false], ["wait_at_deadline", true]]) {
    if (!(field in want)) continue;
    const e = rnd.afterFailed("k", ttl, null, passed, false);
    let got = e === null ? "again" : verdict(e);
    if (got === "not_acquired") got = "stop";
    assert.equal(got, want[field], field);
  }
}

describe("round.json", () => {
  for (const c of load("round.json")) test(c.name, () => runCase(c, checkRound));
});

// --- replies --------------------------------------------------------------------------------

/** A reply as the case files write it, as ioredis gives it (strings; a RESP3 map as a Map). */
function value(t) {
  if (t === null) return null;
  const [[tag, v]] = Object.entries(t);
  switch (tag) {
    case "int":
    case "double":
      return v;
    case "bulk":
    case "simple":
      return v;
    case "bool":
      return v;
    case "array":
    case "set":
      return v.map(value);
    case "map":
      return new Map(v.map(([k, x]) => [value(k), value(x)]));
    default:
      throw new Error(`unknown reply tag ${tag}`);
  }
}

/** This package's decoding of a sample, in the case files' shape. */
function decode(command, reply) {
  switch (command) {
    case "LOCK.INFO": {
      const i = core.parseInfo("s", reply);
      if (i === null) return null;
      return {
        owner: i.owner, token: i.token, count: i.count, ttl_ms: i.ttl, waiters: i.waiters,
        mode: i.mode, holders: i.holders, limit: i.limit, permits_free: i.permitsFree,
      };
    }
    case "LOCK.HOLDERS":
      return core.parseHolders("s", reply).map((h) => ({ owner: h.owner, token: h.token, count: h.count, ttl_ms: h.ttl, permits: h.permits }));
    case "LOCK.HISTORY":
    case "LOCK.LOG":
      return core.parseLog("s", reply).map((e) => ({
        id: e.id, time_ms: e.time, db: e.db, key: e.key, owner: e.owner, token: e.token, reason: e.reason,
        held_ms: e.held, who: e.who, waiters: e.waiters,
      }));
    case "LOCK.STATS":
      return core.parseStats("s", reply).map((s) => ({
        key: s.key, waits: s.waits, granted: s.granted, timeouts: s.timeouts, contended: s.contended,
        wait_ms_total: s.waitMsTotal, error: s.error, wait_ms_max: s.waitMsMax,
      }));
    case "LOCK.WAITERS":
      return core.parseWaiters("s", reply).map((w) => ({
        owner: w.owner, mode: w.mode, limit: w.limit, permits: w.permits, client: w.client,
        waited_ms: w.waited, timeout_ms: w.timeout, ttl_ms: w.ttl,
      }));
    default:
      throw new Error(`no decoder for ${command}`);
  }
}

describe("replies.json", () => {
  for (const c of load("replies.json")) {
    test(c.name, () =>
      runCase(c, (c) => {
        assert.ok("decoded" in c, "no decoded");
        const command = c.command[0];
        // holders() is an array: no lock, no holders.
        const want = command === "LOCK.HOLDERS" && c.decoded === null ? [] : c.decoded;
        for (const resp of ["resp2", "resp3"]) assert.deepEqual(decode(command, value(c[resp])), want, resp);
      }),
    );
  }
});
