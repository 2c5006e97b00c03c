// Replica acknowledgements (RelockOptions.replicaAcks) against a real master with one replica:
// a grant (acquire, a campaign's LOCK.WAIT) counts only once the replica acknowledged it
// (WAIT on the write's own connection); with the replica stopped (SIGSTOP) an acquisition or
// a campaign fails with an error naming the master and how many acknowledged, and leaves no
// hold there; a renewal the replica did not acknowledge does not count and a re-entry is taken
// back, unless (a renewal) the master has fewer replicas connected than asked. With Redlock, a master whose replica did not acknowledge
// is one failed master of the round.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, test } from "node:test";

import { connect, relock, closeAll, withReplica, startMaster, replicaOf } from "./helpers.mjs";
import { eventually } from "./servers.mjs";

const require = createRequire(import.meta.url);
const { InvalidArgumentError, NotAcquiredError, Relock, DEFAULT_REPLICA_ACK_TIMEOUT } = require("../dist/index.js");
const Redis = require("ioredis").default;

after(closeAll);

const ACKS = { replicaAcks: 1, replicaAckTimeout: 200 };
const unacked = (s, what) => new RegExp(`127\\.0\\.0\\.1:${s.port}: only 0 of 1 required replica acknowledgements within 200 ms; ${what}`);
/** How many LOCK.WAIT the server ran (INFO commandstats). */
const lockWaits = async (r) => Number(/cmdstat_lock\.wait:calls=(\d+)/i.exec(String(await r.call("INFO", "commandstats")))?.[1] ?? 0);

test("the options: defaults, and values out of range refused before any server is asked", () => {
  const r = new Redis({ lazyConnect: true });
  const locks = new Relock(r);
  assert.equal(locks.replicaAcks, 0);
  assert.equal(locks.replicaAckTimeout, DEFAULT_REPLICA_ACK_TIMEOUT);
  assert.equal(DEFAULT_REPLICA_ACK_TIMEOUT, 500);
  for (const bad of [{ replicaAcks: -1 }, { replicaAcks: 1.5 }, { replicaAckTimeout: 0 }, { replicaAckTimeout: Number.NaN }]) {
    assert.throws(() => new Relock(r, bad), InvalidArgumentError, JSON.stringify(bad));
  }
});

test("an acknowledged grant passes: acquire, renew, and a campaign granted by LOCK.WAIT", () =>
  withReplica(async (m, replica) => {
    const locks = relock(connect(m), ACKS);
    const hold = await locks.acquireOrThrow("ra", { ttl: 5000, wait: 0 });
    // Acknowledged: the replica has it the moment the call resolves.
    assert.ok((await connect(replica).call("LOCK.INFO", "ra")) !== null);
    await hold.renew();
    assert.equal(await hold.release(), true);

    const a = await locks.campaign("re", "a", { ttl: 5000 });
    const b = locks.campaign("re", "b", { ttl: 5000 });
    assert.ok(await eventually(async () => (await locks.leader("re"))?.waiters === 1));
    await a.resign();
    const lead = await b;
    assert.equal(lead.value, "b");
    const onReplica = await connect(replica).call("LOCK.INFO", "re");
    assert.ok(JSON.stringify(onReplica).includes(lead.owner), JSON.stringify(onReplica));
    await lead.resign();
  }));

test("with the replica stopped, acquire and campaign fail naming the master, and leave no hold there", () =>
  withReplica(async (m, replica) => {
    const locks = relock(connect(m), ACKS);
    const r = connect(m);
    replica.pause();
    try {
      await assert.rejects(locks.acquireOrThrow("rs", { ttl: 5000, wait: 0 }), (e) => e instanceof NotAcquiredError && unacked(m, "released again there").test(e.message) && e.servers.includes(`127.0.0.1:${m.port}`));
      assert.equal(await r.call("LOCK.INFO", "rs"), null);
      assert.equal(await locks.acquire("rs", { ttl: 5000, wait: 0 }), null);
      assert.equal(await r.call("LOCK.INFO", "rs"), null);

      // A campaign on a free key (LOCK.ACQUIRE first) and one queued behind a leader (its
      // grant from LOCK.WAIT on a connection of its own, the WAIT behind it there).
      await assert.rejects(locks.campaign("rc", "a", { ttl: 5000, timeout: 0 }), (e) => unacked(m, "released again there").test(e.message));
      assert.equal(await r.call("LOCK.INFO", "rc"), null);
      const other = `x/${"0".repeat(32)}`;
      assert.ok(await r.call("LOCK.ACQUIRE", "rc", other, 5000));
      const waitsBefore = await lockWaits(r);
      const campaign = locks.campaign("rc", "b", { ttl: 5000, timeout: 1500 });
      campaign.catch(() => undefined);
      assert.ok(await eventually(async () => (await locks.leader("rc"))?.waiters === 1));
      assert.equal(await r.call("LOCK.RELEASE", "rc", other), 0);
      await assert.rejects(campaign, (e) => e instanceof NotAcquiredError && unacked(m, "released again there").test(e.message));
      assert.ok((await lockWaits(r)) > waitsBefore);
      assert.equal(await r.call("LOCK.INFO", "rc"), null);
    } finally {
      replica.resume();
    }
    // The replica back: the same calls succeed.
    const lead = await locks.campaign("rc", "c", { ttl: 5000, timeout: 5000 });
    await lead.resign();
  }));

test("a renewal the replica did not acknowledge does not count; with fewer replicas connected than asked it does", () =>
  withReplica(async (m, replica) => {
    const locks = relock(connect(m), ACKS);
    const hold = await locks.acquireOrThrow("rr", { ttl: 10_000, wait: 0 });
    const before = hold.validUntil;
    replica.pause();
    try {
      await assert.rejects(hold.renew(), (e) => e instanceof NotAcquiredError && unacked(m, "the renewal does not count").test(e.message));
      assert.equal(hold.validUntil, before);
      assert.equal(hold.lost, false);
      // A re-entry not acknowledged is taken back: the body does not run, the count stays 1.
      let ran = false;
      await assert.rejects(hold.reenter(() => (ran = true)), (e) => e instanceof NotAcquiredError && unacked(m, "released again there").test(e.message));
      assert.equal(ran, false);
      assert.equal((await locks.holders("rr"))[0]?.count, 1);
    } finally {
      replica.resume();
    }
    await hold.renew();
    assert.ok(hold.validUntil > before);
    // No replica connected at all (it is gone: the promoted replica after a failover): the
    // renewal counts with every connected replica's acknowledgement, a new grant does not.
    replica.kill();
    assert.ok(await eventually(async () => String(await connect(m).call("INFO", "replication")).includes("connected_slaves:0")));
    await hold.renew();
    await assert.rejects(locks.acquireOrThrow("rr2", { wait: 0 }), (e) => unacked(m, "released again there").test(e.message));
    assert.equal(await hold.release(), true);
  }));

test("Redlock: a master whose replica did not acknowledge is a failed master of the round", async () => {
  const masters = [];
  const replicas = [];
  try {
    for (let i = 0; i < 3; i++) masters.push(await startMaster());
    for (const m of masters) replicas.push(await replicaOf(m));
    const names = masters.map((m) => `127.0.0.1:${m.port}`);
    const locks = relock(masters.map((m) => connect(m)), ACKS);
    const heldOn = (m, key) => connect(m).call("LOCK.INFO", key);
    replicas[0].pause();
    // Two of three acknowledged: held there only (the first master's grant released again).
    const hold = await locks.acquireOrThrow("rl", { ttl: 5000, wait: 0 });
    assert.deepEqual(Object.keys(hold.tokens), names.slice(1));
    assert.ok(await eventually(async () => (await heldOn(masters[0], "rl")) === null));
    await hold.renew();
    assert.equal(await hold.release(), true);
    replicas[1].pause();
    await assert.rejects(locks.acquireOrThrow("rl", { ttl: 5000, wait: 0 }), (e) =>
      e instanceof NotAcquiredError && /no quorum, 1 of 3 servers granted/.test(e.message) && names.slice(0, 2).every((n) => e.message.includes(`${n}: only 0 of 1 required replica acknowledgements`)));
    for (const m of masters) assert.ok(await eventually(async () => (await heldOn(m, "rl")) === null));
  } finally {
    closeAll();
    replicas.forEach((r) => r.close());
    masters.forEach((m) => m.close());
  }
});

test("a WAIT refused (an ACL that allows LOCK.* but not WAIT) counts as no acknowledgement: the grant is taken back", () =>
  withReplica(async (m) => {
    const admin = connect(m);
    await admin.call("ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait");
    const locks = relock(connect(m, 3, { username: "nowait", password: "pw" }), ACKS);
    await assert.rejects(locks.acquireOrThrow("rw", { ttl: 5000, wait: 0 }), (e) =>
      e instanceof NotAcquiredError && /only 0 of 1 required replica acknowledgements within 200 ms \(WAIT refused: NOPERM.*\); released again there/.test(e.message));
    assert.equal(await admin.call("LOCK.INFO", "rw"), null);
  }));

test("an acked write's WAIT blocks a connection of its own: a command on the shared connection answers meanwhile", () =>
  withReplica(async (m, replica) => {
    const locks = relock(connect(m), { replicaAcks: 1, replicaAckTimeout: 3000 });
    const hold = await locks.acquireOrThrow("rq", { ttl: 20_000, wait: 0 });
    const r = connect(m);
    replica.pause();
    try {
      const renewal = hold.renew().catch((e) => e);
      const acquisition = locks.acquireOrThrow("rq2", { ttl: 20_000, wait: 0 }).catch((e) => e);
      // Both WAITs are blocked on the server.
      assert.ok(await eventually(async () => (String(await r.call("CLIENT", "LIST")).match(/cmd=wait/g) ?? []).length >= 2));
      const t0 = performance.now();
      assert.equal((await locks.holders("rq")).length, 1);
      const took = performance.now() - t0;
      assert.ok(took < 1500, `LOCK.HOLDERS took ${took} ms behind the WAITs`);
      assert.ok((await renewal) instanceof NotAcquiredError);
      assert.ok((await acquisition) instanceof NotAcquiredError);
      assert.equal(hold.lost, false);
    } finally {
      replica.resume();
    }
    await hold.renew();
    assert.equal(await hold.release(), true);
  }));

test("a grant not acknowledged whose undo got no answer: the wait goes on under a new owner, which a late undo cannot take", () =>
  withReplica(async (m, replica) => {
    // The package's connections are duplicates of this client: their LOCK.RELEASE is held
    // back 3 s (an undo that lands after the client gave up on it), the replica resumed then.
    const base = connect(m);
    const duplicate = base.duplicate.bind(base);
    let landed = 0;
    base.duplicate = (...a) => {
      const c = duplicate(...a);
      const send = c.sendCommand.bind(c);
      c.sendCommand = (cmd, ...rest) => {
        if (String(cmd.name).toLowerCase() !== "lock.release") return send(cmd, ...rest);
        replica.resume();
        return new Promise((res) => setTimeout(res, 3000)).then(() => send(cmd, ...rest)).finally(() => (landed += 1)); // the undo delivered late (not a wait)
      };
      return c;
    };
    const locks = relock(base, { replicaAcks: 1, replicaAckTimeout: 1000 });
    replica.pause();
    let hold;
    try {
      hold = await locks.acquireOrThrow("ru", { ttl: 20_000, wait: 15_000 });
    } finally {
      replica.resume();
    }
    assert.ok(await eventually(() => landed >= 1));
    const info = await connect(m).call("LOCK.INFO", "ru");
    assert.ok(info !== null && JSON.stringify(info).includes(hold.owner), JSON.stringify(info));
    assert.equal(hold.lost, false);
  }));

test("a group waited for key by key: a grant not acknowledged and taken back gets no delayed release, which could take its next grant", () =>
  withReplica(async (m, replica) => {
    // The package's connections are duplicates of this client: the replica resumes as the
    // undo (LOCK.RELEASE) of the unacknowledged grant is sent.
    const base = connect(m);
    const duplicate = base.duplicate.bind(base);
    base.duplicate = (...a) => {
      const c = duplicate(...a);
      const send = c.sendCommand.bind(c);
      c.sendCommand = (cmd, ...rest) => {
        if (String(cmd.name).toLowerCase() === "lock.release") replica.resume();
        return send(cmd, ...rest);
      };
      return c;
    };
    const r = connect(m);
    const other = `x/${"0".repeat(32)}`;
    assert.ok(await r.call("LOCK.ACQUIRE", "gb", other, 20_000));
    const locks = relock(base, { replicaAcks: 1, replicaAckTimeout: 1000, retryDelay: 0 });
    const group = locks.acquireAllOrThrow(["ga", "gb"], { ttl: 20_000, wait: 15_000 });
    group.catch(() => undefined);
    // "ga" taken, "gb" waited for: granted while the replica is stopped, so not acknowledged
    // and taken back; waited for again under the same owner, and granted.
    assert.ok(await eventually(async () => (await locks.waiters("gb")).length === 1));
    replica.pause();
    try {
      assert.equal(await r.call("LOCK.RELEASE", "gb", other), 0);
      const hold = await group;
      await locks.settle(); // the background releases, a delayed repeat included
      for (const key of ["ga", "gb"]) {
        const info = await r.call("LOCK.INFO", key);
        assert.ok(info !== null && JSON.stringify(info).includes(hold.owner), `${key}: ${JSON.stringify(info)}`);
      }
      await hold.release();
    } finally {
      replica.resume();
    }
  }));
