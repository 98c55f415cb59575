import { Worker } from 'node:worker_threads';

/**
 * The operator's regular expressions (CONTENT_FILTER_PATTERNS), tested against user text off the request loop and
 * within a time bound. JavaScript's backtracking engine has no timeout: one pattern with nested quantifiers
 * (`(a+)+$`) takes exponential time on a short crafted input, and on the request thread that would stop every
 * request of the node. Here the patterns run in a worker thread, one text set at a time; a test that has not
 * answered within `timeoutMs` ends that worker (a new one starts for the next) and is reported as timed out.
 */
export type PatternOutcome = { match: number } | { timedOut: true };

/** The worker's whole program (a script: no file to locate in the sources, the per-file build or the bundle). */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const patterns = workerData.patterns.map((p) => new RegExp(p, 'iu'));
parentPort.on('message', ({ id, texts }) => {
  for (const text of texts) {
    for (let i = 0; i < patterns.length; i++) {
      if (patterns[i].test(text)) return parentPort.postMessage({ id, match: i });
    }
  }
  parentPort.postMessage({ id, match: -1 });
});
`;

interface Job {
  id: number;
  texts: readonly string[];
  resolve: (outcome: PatternOutcome) => void;
  reject: (err: Error) => void;
}

export class BoundedPatterns {
  private worker: Worker | undefined;
  /** whether `worker` has started (its start-up, tens of milliseconds on a busy machine, is not counted in a test's bound) */
  private online = false;
  private readonly queue: Job[] = [];
  private running: { job: Job; timer: NodeJS.Timeout } | undefined;
  private nextId = 1;
  private closed = false;
  /** workers ended because a test ran past the bound (for the log and the tests) */
  timeouts = 0;

  constructor(
    private readonly patterns: readonly string[],
    private readonly timeoutMs: number,
  ) {}

  /** The index of the first pattern that matches one of the texts (-1: none), or that the test ran past the bound. */
  test(texts: readonly string[]): Promise<PatternOutcome> {
    if (this.patterns.length === 0 || texts.length === 0) return Promise.resolve({ match: -1 });
    if (this.closed) return Promise.reject(new Error('The content filter is closed'));
    return new Promise((resolve, reject) => {
      this.queue.push({ id: this.nextId++, texts, resolve, reject });
      this.pump();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    const pending = [...(this.running ? [this.running.job] : []), ...this.queue.splice(0)];
    if (this.running) clearTimeout(this.running.timer);
    this.running = undefined;
    for (const job of pending) job.reject(new Error('The content filter is closed'));
    const worker = this.worker;
    this.worker = undefined;
    this.online = false;
    if (worker) await worker.terminate();
  }

  private spawn(): Worker {
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { patterns: [...this.patterns] },
      // the patterns and one request's texts: a worker that needs more is broken, not busy
      resourceLimits: { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 16 },
    });
    worker.unref();
    worker.once('online', () => {
      if (this.worker !== worker) return;
      this.online = true;
      this.pump();
    });
    worker.on('message', (reply: { id: number; match: number }) => {
      const current = this.running;
      if (!current || current.job.id !== reply.id) return;
      clearTimeout(current.timer);
      this.running = undefined;
      current.job.resolve({ match: reply.match });
      this.pump();
    });
    const lost = (err: Error) => {
      if (this.worker !== worker) return;
      const started = this.online;
      this.worker = undefined;
      this.online = false;
      // a worker that never started fails what waits for it (no respawning in a loop); the next test tries again
      if (!started) for (const job of this.queue.splice(0)) job.reject(err);
      const current = this.running;
      this.running = undefined;
      if (current) {
        clearTimeout(current.timer);
        current.job.reject(err);
      }
      this.pump();
    };
    worker.on('error', lost);
    worker.on('exit', (code) => lost(new Error(`The content filter's worker exited (code ${code})`)));
    return worker;
  }

  private pump(): void {
    if (this.running || this.closed || this.queue.length === 0) return;
    // a new worker first comes online (then this runs again); the bound counts from the test's start there
    const worker = (this.worker ??= this.spawn());
    if (!this.online) return;
    const job = this.queue.shift()!;
    const timer = setTimeout(() => {
      if (this.running?.job !== job) return;
      this.running = undefined;
      this.timeouts++;
      // the pattern is still running there: that worker is ended, the next test gets a new one
      this.worker = undefined;
      this.online = false;
      void worker.terminate();
      job.resolve({ timedOut: true });
      this.pump();
    }, this.timeoutMs);
    this.running = { job, timer };
    worker.postMessage({ id: job.id, texts: job.texts });
  }
}
