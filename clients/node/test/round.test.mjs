// The Redlock round as pure logic, with fake masters and no server: which replies decide a
// round, what a finished round means for an acquisition, a renewal, a release and a wait, the
// validity arithmetic with drift, and where a failed round is given back. The cases follow
// relock-client's (client/src/round.rs); where the package decides otherwise, the case says so.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { describe, test } from "node:test";

const require = createRequire(import.meta.url);
const core = require("../dist/core.js");
const { NotAcquiredError, OtherLimitError, OtherModeError, RelockError, ServerError } = require("../dist/index.js");
const { ReplyError } = require("ioredis");

// --- fake masters ---------------------------------------------------------------------------

/** Granted (renewed, released) with this token (count left, for a release). */
const Grant = (token) => ({ grant: token });
/** `ERR lock has another limit (n)`: permanent. */
const Limit = (limit) => ({ limit });
const REFUSE = "refuse"; // nil: another owner's, or no longer ours
const TIMEOUT = "timeout"; // no answer within the node timeout
const DOWN = "down"; // the connection was refused: transient
const BUSY = "busy"; // BUSY: transient
const WRONGTYPE = "wrongtype"; // permanent
const NO_MODULE = "no module"; // the module is not loaded: permanent
const OTHER_MODE = "other mode"; // ERR lock is held in another mode: permanent

/** The error ioredis rejects with for an error reply `-line`. */
const offTheWire = (line) => new ReplyError(line);

const ERRORS = {
  [TIMEOUT]: () => new core.TimeoutFailure("no reply within 100 ms (LOCK.ACQUIRE)"),
  [DOWN]: () => Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6379"), { code: "ECONNREFUSED" }),
  [BUSY]: () => offTheWire("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
  [WRONGTYPE]: () => offTheWire("WRONGTYPE Operation against a key holding the wrong kind of value"),
  [NO_MODULE]: () => offTheWire("ERR unknown command 'LOCK.ACQUIRE', with args beginning with: 'k' "),
  [OTHER_MODE]: () => offTheWire("ERR lock is held in another mode"),
};

/** What a fake master's answer is to the round: [value, failure]. */
function reply(fake) {
  if (fake && typeof fake === "object" && "grant" in fake) return [fake.grant, undefined];
  if (fake && typeof fake === "object" && "limit" in fake) {
    return [null, core.classify(offTheWire(`ERR lock has another limit (${fake.limit})`))];
  }
  if (fake === REFUSE) return [null, undefined];
  return [null, core.classify(ERRORS[fake]())];
}

const names = (n) => Array.from({ length: n }, (_, i) => `m${i}`);
const indices = (servers) => servers.map((s) => Number(s.slice(1)));

/**
 * A round over `masters` fake masters, started at 0 and fed `replies` ([master, answer]) in
 * order, finished `elapsed` ms later; returns it and the progress after each reply.
 */
function run(masters, replies, elapsed = 5, untilAll = false) {
  const rnd = new core.Round(names(masters), 0, untilAll);
  const progress = replies.map(([i, fake]) => rnd.onReply(i, ...reply(fake)));
  return [rnd.finish(elapsed), progress];
}

test("the fakes fail the way their names say", () => {
  for (const [fake, permanent] of [
    [TIMEOUT, false],
    [DOWN, false],
    [BUSY, false],
    [WRONGTYPE, true],
    [NO_MODULE, true],
    [Limit(3), true],
    [OTHER_MODE, true],
  ]) {
    const [value, failure] = reply(fake);
    assert.equal(value, null);
    assert.equal(!!failure.permanent, permanent, JSON.stringify(fake));
  }
  assert.deepEqual(reply(TIMEOUT)[1], { message: "no reply within 100 ms (LOCK.ACQUIRE)", timeout: true });
  assert.match(reply(NO_MODULE)[1].message, /is the relock module loaded on this server\?/);
  for (const line of [
    "LOADING Redis is loading the dataset in memory",
    "READONLY You can't write against a read only replica.",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "OOM command not allowed",
    "CLUSTERDOWN The cluster is down",
    "MASTERDOWN Link with MASTER is down",
    "MOVED 3999 127.0.0.1:6381",
    "NOREPLICAS Not enough good replicas to write.",
    "ERR max number of clients reached",
  ]) {
    assert.ok(!core.classify(offTheWire(line)).permanent, line);
  }
  for (const line of [
    "NOPERM this user has no permissions to run the 'lock.acquire' command",
    "WRONGPASS invalid username-password pair or user is disabled.",
    "ERR invalid ttl_ms",
  ]) {
    assert.ok(core.classify(offTheWire(line)).permanent, line);
  }
  // A connection error or a closed connection is not an error reply: transient.
  assert.ok(!core.classify(new Error("Connection is closed.")).permanent);
});

// --- replies decide the round ---------------------------------------------------------------

const [P, W, L] = ["pending", "won", "lost"];

describe("replies decide the round", () => {
  // [what, masters, until all answered, replies, progress after each, tokens kept, failed in order]
  const cases = [
    ["one master grants", 1, false, [[0, Grant(7)]], [W], [7], []],
    ["one master refuses", 1, false, [[0, REFUSE]], [L], [null], [0]],
    ["one master times out", 1, false, [[0, TIMEOUT]], [L], [null], [0]],
    ["one master fails permanently", 1, false, [[0, NO_MODULE]], [L], [null], [0]],
    ["3: two grants win before the third answers; its late grant is ignored", 3, false,
      [[0, Grant(1)], [1, Grant(2)], [2, Grant(3)]], [P, W, W], [1, 2, null], []],
    ["3: grant, refusal, grant", 3, false, [[0, Grant(1)], [1, REFUSE], [2, Grant(3)]], [P, P, W], [1, null, 3], [1]],
    ["3: two refusals lose; a late grant is ignored", 3, false,
      [[0, REFUSE], [1, REFUSE], [2, Grant(3)]], [P, L, L], [null, null, null], [0, 1]],
    ["3: a timeout and a transient error lose like refusals", 3, false, [[2, TIMEOUT], [0, DOWN]], [P, L], [null, null, null], [2, 0]],
    ["3: a grant, a timeout, a refusal", 3, false, [[0, Grant(1)], [1, TIMEOUT], [2, REFUSE]], [P, P, L], [1, null, null], [1, 2]],
    ["3: one permanent error leaves a quorum to win", 3, false,
      [[1, WRONGTYPE], [0, Grant(1)], [2, Grant(3)]], [P, P, W], [1, null, 3], [1]],
    ["3: replies out of the masters' order", 3, false, [[2, Grant(3)], [0, Grant(1)]], [P, W], [1, null, 3], []],
    ["3: a master answering twice counts once", 3, false,
      [[0, Grant(1)], [0, Grant(9)], [0, REFUSE], [1, BUSY], [2, Grant(3)]], [P, P, P, P, W], [1, null, 3], [1]],
    ["3: a master the round does not know is ignored", 3, false,
      [[7, Grant(7)], [3, REFUSE], [-1, REFUSE], [0, Grant(1)], [1, Grant(2)]], [P, P, P, P, W], [1, 2, null], []],
    ["5: three grants win; late refusals are ignored", 5, false,
      [[0, Grant(1)], [3, Grant(4)], [4, Grant(5)], [1, REFUSE], [2, REFUSE]], [P, P, W, W, W], [1, null, null, 4, 5], []],
    ["5: three refusals lose", 5, false,
      [[0, REFUSE], [1, REFUSE], [2, REFUSE], [3, Grant(4)]], [P, P, L, L], [null, null, null, null, null], [0, 1, 2]],
    ["5: decided by the last reply, won", 5, false,
      [[0, Grant(1)], [1, TIMEOUT], [2, REFUSE], [3, Grant(4)], [4, Grant(5)]], [P, P, P, P, W], [1, null, null, 4, 5], [1, 2]],
    ["5: decided by the last reply, lost to a mix of failures", 5, false,
      [[0, Grant(1)], [1, Grant(2)], [2, REFUSE], [3, TIMEOUT], [4, BUSY]], [P, P, P, P, L], [1, 2, null, null, null], [2, 3, 4]],
    ["5: two permanent errors still leave a quorum", 5, false,
      [[0, NO_MODULE], [1, WRONGTYPE], [2, Grant(3)], [3, Grant(4)], [4, Grant(5)]], [P, P, P, P, W], [null, null, 3, 4, 5], [0, 1]],
    ["all answered, 3: a quorum is not enough while one is to answer", 3, true,
      [[0, Grant(1)], [1, Grant(2)], [2, REFUSE]], [P, P, W], [1, 2, null], [2]],
    ["all answered, 3: a grant after two refusals is kept (to be undone)", 3, true,
      [[0, REFUSE], [1, REFUSE], [2, Grant(3)]], [P, P, L], [null, null, 3], [0, 1]],
    ["all answered, 1: a refusal", 1, true, [[0, REFUSE], [0, Grant(1)]], [L, L], [null], [0]],
  ];
  for (const [what, masters, untilAll, replies, progress, tokens, failed] of cases) {
    test(what, () => {
      const [rnd, seen] = run(masters, replies, 5, untilAll);
      assert.deepEqual(seen, progress);
      assert.deepEqual(names(masters).map((_, i) => rnd.agreed.get(i) ?? null), tokens);
      assert.deepEqual(rnd.failures.map(([i]) => i), failed);
      assert.deepEqual(rnd.agreedBy(), tokens.map((t) => t !== null));
    });
  }
});

// --- acquisitions and renewals --------------------------------------------------------------

const TTL = 10_000; // ms; drift 102 ms
const left = (elapsed) => ["valid", TTL - elapsed - 102];
/** NotAcquiredError, retryable, naming the masters that failed (refusals are nobody's fault). */
const busy = (...blamed) => ["not acquired", blamed];
/** An error retrying cannot help, naming the masters that failed permanently. */
const permanent = (...blamed) => ["permanent", blamed];
const EXHAUSTED = ["exhausted"];
const LOST = ["lost"]; // a renewal: the hold is gone
const RETRY = ["retry"]; // a renewal: only unanswered, try again while validity is left

const ms = (x) => Math.round(x * 1e6) / 1e6;

function acquired(rnd) {
  const until = rnd.validUntil(TTL);
  if (until !== null) return ["valid", ms(until - rnd.started)];
  const e = rnd.acquireError("k", TTL, null);
  assert.equal(e.key, "k");
  if (rnd.won()) {
    assert.ok(e instanceof NotAcquiredError && /leaving no validity/.test(e.message));
    return EXHAUSTED;
  }
  if (e instanceof NotAcquiredError) {
    assert.ok(e.retryable);
    return ["not acquired", indices(e.servers)];
  }
  assert.ok(e instanceof ServerError && !e.retryable, String(e));
  return ["permanent", indices(e.servers)];
}

function renewed(rnd) {
  const until = rnd.validUntil(TTL);
  if (until !== null) return ["valid", ms(until - rnd.started)];
  return rnd.renewVerdict() === "lost" ? LOST : RETRY;
}

describe("acquisitions and renewals are judged", () => {
  // [what, masters, replies, elapsed ms, acquisition, renewal]
  const cases = [
    ["1: granted", 1, [[0, Grant(1)]], 3, left(3), left(3)],
    ["1: refused", 1, [[0, REFUSE]], 3, busy(), LOST],
    ["1: timeout", 1, [[0, TIMEOUT]], 100, busy(0), RETRY],
    ["1: transient error", 1, [[0, BUSY]], 3, busy(0), RETRY],
    // relock-client reports a permanent error for the renewal; the package ends the hold,
    // which no renewal can keep any more, and says why in the loss reason.
    ["1: permanent error", 1, [[0, WRONGTYPE]], 3, permanent(0), LOST],
    ["3: all granted", 3, [[0, Grant(1)], [1, Grant(2)]], 100, left(100), left(100)],
    ["3: quorum despite a refusal", 3, [[0, REFUSE], [1, Grant(2)], [2, Grant(3)]], 40, left(40), left(40)],
    ["3: one grant, two refusals", 3, [[0, Grant(1)], [1, REFUSE], [2, REFUSE]], 3, busy(), LOST],
    ["3: one grant, a refusal, a timeout", 3, [[0, Grant(1)], [1, REFUSE], [2, TIMEOUT]], 100, busy(2), RETRY],
    ["3: a refusal and a permanent error: lost for a renewal", 3, [[0, Grant(1)], [1, REFUSE], [2, WRONGTYPE]], 3, busy(2), LOST],
    ["3: two permanent errors", 3, [[0, Grant(1)], [1, NO_MODULE], [2, WRONGTYPE]], 3, permanent(1, 2), LOST],
    ["3: one permanent error and a timeout", 3, [[0, NO_MODULE], [1, TIMEOUT]], 100, busy(0, 1), RETRY],
    ["3: transient errors only", 3, [[0, DOWN], [1, BUSY]], 3, busy(0, 1), RETRY],
    ["5: three grants", 5, [[4, Grant(5)], [2, Grant(3)], [0, Grant(1)]], 250, left(250), left(250)],
    ["5: two permanent, one timeout", 5, [[0, Grant(1)], [1, Grant(2)], [2, NO_MODULE], [3, WRONGTYPE], [4, TIMEOUT]], 100,
      busy(2, 3, 4), RETRY],
    ["5: three permanent", 5, [[0, Grant(1)], [2, NO_MODULE], [3, WRONGTYPE], [4, NO_MODULE]], 3, permanent(2, 3, 4), LOST],
    ["5: two refusals and a permanent error: lost for a renewal", 5, [[0, REFUSE], [1, Grant(2)], [2, WRONGTYPE], [3, REFUSE]], 3,
      busy(2), LOST],
    ["5: one refusal, two timeouts", 5, [[0, REFUSE], [1, Grant(2)], [2, TIMEOUT], [3, TIMEOUT]], 100, busy(2, 3), RETRY],
    // A renewal that took the whole ttl renews nothing the holder can count on; the hold's own
    // validity (kept from its last good round) decides when it is lost.
    ["3: won, but after the whole ttl", 3, [[0, Grant(1)], [1, Grant(2)]], 10_000, EXHAUSTED, RETRY],
    ["3: won, but far past the ttl", 3, [[0, Grant(1)], [1, Grant(2)]], 1e18, EXHAUSTED, RETRY],
    ["3: won with exactly the drift left: none", 3, [[0, Grant(1)], [1, Grant(2)]], 10_000 - 102, EXHAUSTED, RETRY],
    ["3: won with 1 ms more than the drift left", 3, [[0, Grant(1)], [1, Grant(2)]], 10_000 - 103, ["valid", 1], ["valid", 1]],
  ];
  for (const [what, masters, replies, elapsed, acquire, renew] of cases) {
    test(what, () => {
      const [rnd] = run(masters, replies, elapsed);
      assert.deepEqual(acquired(rnd), acquire);
      assert.deepEqual(renewed(rnd), renew);
    });
  }
});

test("a no-quorum error says how many granted and names every failure", () => {
  const [rnd] = run(3, [[0, Grant(1)], [1, REFUSE], [2, TIMEOUT]]);
  const e = rnd.acquireError("k", TTL, null);
  assert.ok(e instanceof NotAcquiredError && e.retryable);
  assert.deepEqual(e.servers, ["m2"]);
  assert.match(e.message, /1 of 3 servers granted, 2 needed/);
  assert.match(e.message, /m1: not granted/);
  assert.match(e.message, /m2: no reply within 100 ms/);
  const [one] = run(1, [[0, REFUSE]]);
  assert.equal(one.acquireError("k", TTL, 300).message, 'lock "k" is held by another owner within 300 ms');
});

// --- validity -------------------------------------------------------------------------------

describe("validity is ttl minus elapsed minus drift", () => {
  // [ttl ms, elapsed ms, validity µs]: ttl - elapsed - (ttl/100 + 2 ms); none at or below 0
  const cases = [
    [1, 0, null],
    [2, 0, null],
    [3, 0, 970],
    [100, 0, 97_000],
    [100, 97, null],
    [100, 96, 1_000],
    [1_000, 500, 488_000],
    [1_000_000_000_000, 0, 989_999_999_998_000],
    [1_000_000_000_000, 2 ** 63, null],
  ];
  const us = (x) => (x === null ? null : Math.round(x * 1000));
  for (const [ttl, elapsed, want] of cases) {
    test(`ttl ${ttl} ms, elapsed ${elapsed} ms`, () => {
      assert.equal(us(core.validity(ttl, elapsed)), want);
      const [rnd] = run(1, [[0, Grant(1)]], elapsed);
      const until = rnd.validUntil(ttl);
      assert.equal(us(until === null ? null : until - rnd.started), want);
    });
  }
  test("no quorum, no validity, however fast; a clock that went back counts as no time", () => {
    const [rnd] = run(3, [[0, Grant(1)]], 0);
    assert.equal(rnd.validUntil(TTL), null);
    assert.equal(core.validity(TTL, -5), TTL - 102);
  });
});

describe("a grant after a long wait is measured again", () => {
  // [replies, elapsed ms, measure with a renewal]
  const cases = [
    [[[0, Grant(1)]], 3, false],
    [[[0, Grant(1)]], 3_000, false], // 6898 ms left of 10 s: enough
    [[[0, Grant(1)]], 3_400, true], // 6498 ms left: under two thirds
    [[[0, Grant(1)]], 20_000, true], // nothing left
    [[[0, REFUSE]], 3_400, false], // nothing granted, nothing to measure
  ];
  for (const [replies, elapsed, late] of cases) {
    test(`${JSON.stringify(replies)} after ${elapsed} ms`, () => {
      const [rnd] = run(1, replies, elapsed);
      assert.equal(rnd.grantedLate(TTL), late);
    });
  }
});

// --- releases -------------------------------------------------------------------------------

describe("releases are judged", () => {
  // A release asks every master and waits for every answer (a master that still holds it would
  // keep it until its ttl); it counts as done with a quorum.
  // [what, masters, replies: Grant(n) = released with n holds left, released]
  const cases = [
    ["1: released", 1, [[0, Grant(0)]], true],
    ["1: one hold of two released", 1, [[0, Grant(1)]], true],
    ["1: not ours", 1, [[0, REFUSE]], false],
    ["1: timeout", 1, [[0, TIMEOUT]], false],
    ["1: permanent error", 1, [[0, WRONGTYPE]], false],
    ["3: all released", 3, [[0, Grant(0)], [1, Grant(0)], [2, Grant(0)]], true],
    ["3: quorum released, one not ours", 3, [[0, Grant(0)], [1, REFUSE], [2, Grant(0)]], true],
    ["3: quorum released, one down", 3, [[0, DOWN], [1, Grant(0)], [2, Grant(0)]], true],
    ["3: one released, two not ours", 3, [[0, Grant(0)], [1, REFUSE], [2, REFUSE]], false],
    ["3: none ours", 3, [[0, REFUSE], [1, REFUSE], [2, REFUSE]], false],
    ["3: one released, one not ours, one timeout", 3, [[0, Grant(0)], [1, REFUSE], [2, TIMEOUT]], false],
    ["3: all timed out", 3, [[2, TIMEOUT], [0, TIMEOUT], [1, TIMEOUT]], false],
    ["5: two released, three not ours", 5, [[0, Grant(0)], [1, Grant(0)], [2, REFUSE], [3, REFUSE], [4, REFUSE]], false],
    ["5: three released, two busy", 5, [[0, Grant(0)], [1, BUSY], [2, Grant(0)], [3, BUSY], [4, Grant(0)]], true],
  ];
  for (const [what, masters, replies, released] of cases) {
    test(what, () => {
      const [rnd, progress] = run(masters, replies, 5, true);
      assert.ok(progress.slice(0, -1).every((p) => p === P), "a release waits for every master");
      assert.notEqual(progress.at(-1), P);
      assert.equal(rnd.won(), released);
    });
  }
});

// --- failed acquisitions: given back, and what next -----------------------------------------

describe("a failed round says where to give back", () => {
  // [masters, replies, released now, released later]
  const cases = [
    [1, [[0, REFUSE]], [false], [false]], // refused: nothing landed
    [1, [[0, NO_MODULE]], [false], [false]],
    [1, [[0, TIMEOUT]], [false], [true]], // the request may still be granted
    [3, [[0, Grant(1)], [1, WRONGTYPE], [2, REFUSE]], [true, false, false], [false, false, false]],
    [3, [[0, TIMEOUT], [2, DOWN]], [false, false, false], [true, true, true]], // m1 still to answer
    [5, [[1, Grant(2)], [0, NO_MODULE], [3, WRONGTYPE], [4, REFUSE]], [false, true, false, false, false],
      [false, false, true, false, false]],
  ];
  for (const [masters, replies, now, later] of cases) {
    test(JSON.stringify(replies), () => {
      const [rnd] = run(masters, replies);
      assert.deepEqual(rnd.giveBack(), { now, later });
    });
  }
});

describe("failed acquisitions are judged", () => {
  // [what, masters, replies, deadline passed, bounded, what next, masters named]
  const cases = [
    ["1: refused a bounded wait: the server's own timeout ran out", 1, [[0, REFUSE]], false, true, "stop", []],
    ["1: refused a wait without limit: wait again", 1, [[0, REFUSE]], false, false, "again", []],
    ["1: refused at the deadline", 1, [[0, REFUSE]], true, true, "stop", []],
    ["1: timeout", 1, [[0, TIMEOUT]], false, true, "again", []],
    ["1: timeout at the deadline", 1, [[0, TIMEOUT]], true, true, "stop", [0]],
    ["1: down", 1, [[0, DOWN]], false, true, "again", []],
    ["1: permanent", 1, [[0, NO_MODULE]], false, false, "permanent", [0]],
    ["3: two permanent, before the deadline", 3, [[0, NO_MODULE], [1, WRONGTYPE]], false, false, "permanent", [0, 1]],
    ["3: a refusal and an error", 3, [[0, Grant(1)], [1, REFUSE], [2, BUSY]], false, true, "again", []],
    ["3: a refusal and an error at the deadline", 3, [[0, Grant(1)], [1, REFUSE], [2, BUSY]], true, true, "stop", [2]],
    ["3: only refusals, bounded: several masters wait again", 3, [[0, REFUSE], [1, REFUSE]], false, true, "again", []],
    ["3: a minority cut off by the partial-hold limit", 3, [[0, Grant(1)]], false, true, "again", []],
    ["3: a minority cut off at the deadline", 3, [[0, Grant(1)]], true, true, "stop", []],
  ];
  for (const [what, masters, replies, passed, bounded, want, named] of cases) {
    test(what, () => {
      const [rnd] = run(masters, replies);
      const e = rnd.afterFailed("k", TTL, 1000, passed, bounded);
      if (want === "again") {
        assert.equal(e, null);
        return;
      }
      if (want === "permanent") assert.ok(e instanceof ServerError && !e.retryable, String(e));
      else assert.ok(e instanceof NotAcquiredError && e.retryable, String(e));
      assert.deepEqual(indices(e.servers), named);
    });
  }
});

test("mode and limit refusals name the master", () => {
  let [rnd] = run(1, [[0, Limit(3)]]);
  let e = rnd.acquireError("k", TTL, null);
  assert.ok(e instanceof OtherLimitError);
  assert.deepEqual([e.key, e.servers, e.limit, e.retryable], ["k", ["m0"], 3, false]);
  [rnd] = run(3, [[1, OTHER_MODE], [0, WRONGTYPE], [2, OTHER_MODE]]);
  e = rnd.acquireError("k", TTL, null);
  assert.ok(e instanceof OtherModeError && !e.retryable);
  assert.deepEqual(e.servers, ["m1"]);
  // A minority of them is only a minority.
  [rnd] = run(3, [[0, Limit(0)], [1, Grant(1)], [2, Grant(2)]]);
  assert.deepEqual(acquired(rnd), left(5));
  // Other error replies stay what they were.
  [rnd] = run(1, [[0, NO_MODULE]]);
  assert.deepEqual(acquired(rnd), permanent(0));
});

test("a round without masters is lost, not an exception", () => {
  const rnd = new core.Round([], 0);
  assert.equal(rnd.progress(), L);
  assert.equal(rnd.onReply(0, 1), L);
  rnd.finish(1);
  assert.ok(!rnd.won());
  assert.equal(rnd.validUntil(1000), null);
  assert.ok(rnd.acquireError("k", 1000, null) instanceof RelockError);
});

test("elapsed is measured from the start and never negative", () => {
  assert.equal(new core.Round(names(1), 10).finish(52).elapsed, 42);
  assert.equal(new core.Round(names(1), 10).finish(9).elapsed, 0);
});
