import { AppError } from '../shared/errors.js';

/**
 * The order of a graceful shutdown (SIGTERM, SIGINT, app.close()), within one budget:
 *
 * 1. `begin()`: new requests get 503 SERVICE_UNAVAILABLE in the contract's body (app.ts, the first onRequest hook), and everything that takes background work
 *    (the ingestion workers) hears `closing` and stops claiming; a running job gets its own grace.
 * 2. The requests in flight finish on their own — streamed answers included: their sockets stay
 *    connected until then — for at most `drainMs`.
 * 3. At `drainMs` the requests still running are told to stop: `inFlight` aborts, with a 503 as its reason,
 *    so a model call in progress ends, its credit reservation is released, and the caller gets an answer
 *    instead of a cut connection. They get a little longer (`settleMs`) to write that down.
 * 4. Then sockets close, workers finish stopping, and the database closes (the app's other close hooks).
 *
 * `budgetMs` is what the whole may take (SHUTDOWN_TIMEOUT_MS); the process exits with 1 only if it is
 * exceeded regardless (server.ts).
 */
export class Shutdown {
  private readonly closingController = new AbortController();
  private readonly inFlightController = new AbortController();
  private active = 0;
  private drained: (() => void) | null = null;

  readonly drainMs: number;
  /** After `drainMs`, how long requests told to stop get to finish. */
  readonly settleMs: number;
  /** Grace of a running background job before it is aborted. */
  readonly jobGraceMs: number;

  constructor(readonly budgetMs: number) {
    // a fifth of the budget (1 to 5 s) is kept for what comes after the requests: aborted ones answering, jobs released, the database closed
    const reserve = Math.min(5_000, Math.max(1_000, Math.floor(budgetMs / 5)));
    this.settleMs = Math.floor(reserve / 2);
    this.drainMs = Math.max(0, budgetMs - reserve);
    this.jobGraceMs = Math.min(10_000, this.drainMs);
  }

  /** Aborted when the shutdown begins: stop taking new background work. */
  get closing(): AbortSignal {
    return this.closingController.signal;
  }

  /** Aborted when the requests in flight must stop (their reason: a 503 AppError). Every model call is joined to it (app.ts lazyProviders, stoppedBy). */
  get inFlight(): AbortSignal {
    return this.inFlightController.signal;
  }

  /** Counts a request from its start until its connection's response closes. */
  track(response: { on(event: 'close', listener: () => void): unknown }): void {
    this.active++;
    // `on`, not `once`: a response closes once, and once's wrapper is an allocation on every request
    response.on('close', this.onClosed);
  }

  get requestsInFlight(): number {
    return this.active;
  }

  private readonly onClosed = () => {
    this.active--;
    if (this.active === 0) this.drained?.();
  };

  /**
   * Steps 1 to 3: returns once no request is in flight, or when the time is up (requests told to stop
   * have then had `settleMs` more).
   */
  async drain(): Promise<void> {
    if (!this.closingController.signal.aborted) this.closingController.abort();
    if (await this.idleWithin(this.drainMs)) return;
    this.inFlightController.abort(new AppError(503, 'SERVICE_UNAVAILABLE', 'The server is shutting down; the request was stopped before it finished. Try again'));
    await this.idleWithin(this.settleMs);
  }

  private idleWithin(ms: number): Promise<boolean> {
    if (this.active === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.drained = null;
        resolve(false);
      }, ms);
      this.drained = () => {
        clearTimeout(timer);
        this.drained = null;
        resolve(true);
      };
    });
  }
}
