/**
 * The errors of relock. Every one says whether retrying the same call can help
 * (`retryable`) and names the servers that failed (`servers`, as `host:port`).
 */
import type { LossReason, Who } from "./core";

export interface RelockErrorOptions {
  key?: string;
  servers?: string[];
  retryable?: boolean;
  cause?: unknown;
}

/** Base of every error relock throws. */
export class RelockError extends Error {
  /** The lock's key, when the error is about one. */
  readonly key: string | undefined;
  /** The servers to blame (`host:port`); empty when none is. */
  readonly servers: string[];
  /**
   * Whether the same call can succeed if tried again: false for a usage error or an answer
   * that stays true until someone changes the server or the key (the module is not loaded,
   * the login was refused, the key holds another type, another limit).
   */
  readonly retryable: boolean;

  constructor(message: string, options: RelockErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.key = options.key;
    this.servers = options.servers ?? [];
    this.retryable = options.retryable ?? true;
  }
}

/**
 * The lock was not acquired: another owner held it for the whole wait (or at the one try,
 * with `wait: 0`), or too few Redlock masters granted it. Retrying can help.
 */
export class NotAcquiredError extends RelockError {
  constructor(message: string, options: RelockErrorOptions = {}) {
    super(message, { ...options, retryable: true });
  }
}

/**
 * A hold ended while its holder still counted on it. `reason` says what the client saw and,
 * when the server was asked, why; `loss` is the server's account from LOCK.HISTORY
 * (`cause`: `expired`, `forcereleased`, `deleted`, `flushed`, ...; `who` ended it), undefined
 * when the client did not ask (a blocked event loop). Not retryable: acquire again.
 */
export class LockLostError extends RelockError {
  readonly reason: string;
  readonly loss: LossReason | undefined;

  constructor(message: string, reason: string, loss?: LossReason, options: RelockErrorOptions = {}) {
    super(message, { ...options, retryable: false });
    this.reason = reason;
    this.loss = loss;
  }

  /** The server's word for the loss, undefined when it could not say. */
  get lossCause(): string | undefined {
    return this.loss?.cause ?? undefined;
  }

  /** The client that ended the hold, where the server could tell. */
  get who(): Who | undefined {
    return this.loss?.who ?? undefined;
  }
}

/**
 * A server answered with an error, or did not answer in time. `retryable` tells a passing
 * failure (a timeout, a lost connection, LOADING, BUSY, OOM, READONLY, TRYAGAIN) from one
 * that stays (the module is not loaded, WRONGTYPE, NOPERM, a refused login or argument).
 */
export class ServerError extends RelockError {}

/** A shared request with another limit than the key's (`limit`; 0 = a read lock). */
export class OtherLimitError extends ServerError {
  readonly limit: number;

  constructor(message: string, limit: number, options: RelockErrorOptions = {}) {
    super(message, { ...options, retryable: false });
    this.limit = limit;
  }
}

/** The owner holds the key in the other mode: a shared hold is never upgraded; an exclusive one becomes shared only with `hold.downgrade()`. */
export class OtherModeError extends ServerError {
  constructor(message: string, options: RelockErrorOptions = {}) {
    super(message, { ...options, retryable: false });
  }
}

/** The owner holds the key with another number of permits: a hold keeps the permits it was granted. */
export class OtherPermitsError extends ServerError {
  constructor(message: string, options: RelockErrorOptions = {}) {
    super(message, { ...options, retryable: false });
  }
}

/** A usage error found before any server was asked (a ttl, wait or limit out of range). */
export class InvalidArgumentError extends RelockError {
  constructor(message: string) {
    super(message, { retryable: false });
  }
}

/**
 * LOCK.FENCED refused the command: the token is not a live hold's any more (`-FENCED stale
 * token <token>, current <token | shared | none>`), and nothing ran. `current` is what the
 * server named. Never retried with another token: the holder lost its hold (a leader its
 * term) and must not write.
 */
export class StaleTokenError extends ServerError {
  readonly token: number;
  readonly current: string | undefined;

  constructor(message: string, token: number, current: string | undefined, options: RelockErrorOptions = {}) {
    super(message, { ...options, retryable: false });
    this.token = token;
    this.current = current;
  }
}
