// Type-checked (tsc --noEmit), never run: the public API as a TypeScript user writes it,
// against the declarations the package ships.
import Redis, { Cluster } from "ioredis";
import { Hold, LockLostError, NotAcquiredError, Relock, RelockError, type LockInfo } from "../dist/index";

async function usage(): Promise<void> {
  const one = new Relock(new Redis(), { ownerPrefix: "billing", nodeTimeout: 100 });
  const redlock = new Relock([new Redis(6379), new Redis(6380), new Redis(6381)]);
  const cluster = new Relock(new Cluster([{ host: "127.0.0.1", port: 7000 }]));
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
}
void usage;
