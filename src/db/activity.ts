import type { PGlite, QueryOptions, Results, Transaction } from '@electric-sql/pglite';

/**
 * The app's use of the embedded engine, which runs one statement at a time for the whole process: how many
 * of its operations (statements, transactions) are in flight, and when the last one ended. Background jobs
 * that would otherwise hold the engine between a request's statements (the vector drain) give way to it:
 * they run their next statement once the app has left the engine alone for a while (see VectorDrain).
 */
export class EngineActivity {
  private inFlight = 0;
  private lastEndedAt = Number.NEGATIVE_INFINITY;

  track<T>(operation: Promise<T>): Promise<T> {
    this.inFlight++;
    return operation.finally(() => {
      this.inFlight--;
      this.lastEndedAt = performance.now();
    });
  }

  /** Milliseconds since the app last used the engine: 0 while an operation is in flight. */
  quietFor(now = performance.now()): number {
    return this.inFlight > 0 ? 0 : now - this.lastEndedAt;
  }
}

/** How long the app must have left the engine alone (quietMs), and the longest wait for that (maxWaitMs). */
export interface GiveWay {
  quietMs: number;
  maxWaitMs: number;
}

/**
 * How background work gives way to requests on the embedded engine: a search runs a few statements with up
 * to ~20 ms of scoring between them, so 25 ms without a statement means no request is between two of its
 * own; under a steady load the work still goes on every 250 ms.
 */
export const BACKGROUND_GIVE_WAY: GiveWay = { quietMs: 25, maxWaitMs: 250 };

/** Waits until the app has left the engine alone for `quietMs`, or `maxWaitMs` have passed, or `stop()` says so. */
export async function waitForQuiet(
  activity: EngineActivity,
  giveWay: GiveWay,
  sleep: (ms: number) => Promise<void> = (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  stop: () => boolean = () => false,
): Promise<void> {
  const started = performance.now();
  for (;;) {
    const now = performance.now();
    const quiet = activity.quietFor(now);
    const waited = now - started;
    if (quiet >= giveWay.quietMs || waited >= giveWay.maxWaitMs || stop()) return;
    await sleep(Math.max(1, Math.min(giveWay.quietMs - quiet, giveWay.maxWaitMs - waited)));
  }
}

/** What drizzle's PGlite driver calls on its client (PGlite, or RemotePGlite for the worker thread, which implements as much). */
export type PGliteLike = Pick<PGlite, 'query' | 'transaction'>;

/**
 * A PGlite client whose operations count as the app's activity. A transaction counts as one operation for
 * its whole length: the engine is held for it (its statements go to the transaction, not through here).
 */
export class TrackedPGlite {
  constructor(
    private readonly client: PGliteLike,
    private readonly activity: EngineActivity,
  ) {}

  query<T>(sql: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>> {
    return this.activity.track(this.client.query<T>(sql, params, options));
  }

  transaction<T>(callback: (tx: Transaction) => Promise<T>): Promise<T> {
    return this.activity.track(this.client.transaction(callback));
  }
}
