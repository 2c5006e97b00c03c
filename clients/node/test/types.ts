// Type-checked (tsc --noEmit), never run: the public API as a TypeScript user writes it,
// against the declarations the package ships.
import Redis, { Cluster } from "ioredis";
import {
  GroupHold,
  Hold,
  Leadership,
  StaleTokenError,
  LockLostError,
  NotAcquiredError,
  Relock,
  RelockError,
  type KeyStats,
  type Leader,
  type LeaderChange,
  type LockInfo,
  type LogEntry,
  type LossReason,
  type Who,
} from "../dist/index";

async function usage(): Promise<void> {
  const one = new Relock(new Redis(), { ownerPrefix: "billing", nodeTimeout: 100 });
  const redlock = new Relock([new Redis(6379), new Redis(6380), new Redis(6381)]);
  const cluster = new Relock(new Cluster([{ host: "127.0.0.1", port: 7000 }]));
  const acked = new Relock(new Redis(), { replicaAcks: 1, replicaAckTimeout: 200 });
  const acks: number = acked.replicaAcks + acked.replicaAckTimeout;
  void acks;
  const n: number = await one.using("k", { ttl: 10_000, wait: 5_000 }, async (hold: Hold) => {
    const token: number = hold.token;
    const signal: AbortSignal = hold.signal;
    hold.check();
    await hold.renew(20_000);
    return token + (signal.aborted ? 1 : 0);
  });
  const h: Hold | null = await redlock.acquire("k", { shared: true });
  if (h) {
    const released: boolean = await h.release();
    void released;
  }
  const info: LockInfo | null = await cluster.info("k");
  const e: unknown = null;
  if (e instanceof RelockError && e.retryable) void e.servers;
  if (e instanceof LockLostError) void e.reason;
  if (e instanceof NotAcquiredError) void e.key;
  void n;
  void info;
  // What the module added: permits, downgrade, groups, loss reasons, the journal, statistics.
  const permits: Hold | null = await one.acquire("pool", { shared: true, limit: 10, permits: 3 });
  await permits?.release();
  await one.using("doc", {}, async (w: Hold) => {
    await w.downgrade();
    const shared: boolean = w.shared;
    void shared;
  });
  const total: number = await one.usingAll(["a", "b"], { ttl: 10_000, wait: 1_000 }, async (g: GroupHold) => {
    const perKey: Readonly<Record<string, number>> = g.keyTokens;
    const keys: string[] = g.keys;
    return g.token + keys.length + (perKey["a"] ?? 0);
  });
  const group: GroupHold | null = await one.acquireAll(["a", "b"]);
  if (group) {
    const loss: LossReason | undefined = group.loss;
    const cause: string | null | undefined = loss?.cause;
    const who: Who | undefined = group.who;
    void [cause, who?.client, who?.name, who?.user, who?.addr, loss?.message];
  }
  const log: LogEntry[] = await one.log(10);
  const hist: LogEntry[] = await one.history("k");
  const stats: KeyStats[] = await one.stats();
  if (e instanceof LockLostError) void [e.loss?.cause, e.lossCause, e.who?.client];
  void [total, log[0]?.reason, hist[0]?.who?.client, stats[0]?.waitMsTotal];
  // Elections and fenced writes.
  const lead: Leadership = await one.campaign("leader", "10.0.0.7:8080", { ttl: 10_000, timeout: 5_000 });
  const term: number = lead.term;
  const value: string = lead.value;
  const reply: unknown = await lead.fenced("SET", "leader:config", "v");
  const resigned: boolean = await lead.resign();
  const now: Leader | null = await one.leader("leader");
  for await (const change of one.observe("leader", { signal: lead.signal })) {
    const c: LeaderChange = change;
    void [c.leader?.value, c.leader?.term, c.termRegressed];
  }
  if (e instanceof StaleTokenError) void [e.token, e.current];
  void [term, value, reply, resigned, now?.value];
}
void usage;
