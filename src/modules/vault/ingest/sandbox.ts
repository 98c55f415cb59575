/**
 * Host side of the ingestion worker threads: the CPU work of ingesting a file (prepare.ts: extract,
 * chunk, local embeddings) runs in a `node:worker_threads` Worker with
 * - `resourceLimits` (INGEST_WORKER_HEAP_MB of old-generation heap): a file that needs more makes V8
 *   end that thread (ERR_WORKER_OUT_OF_MEMORY), not the process;
 * - a wall-clock limit (INGEST_TIMEOUT_SECONDS): past it the thread is terminated;
 * - the parsers' own bounds (zip.ts, extract.ts), which refuse most hostile files before they cost much.
 * Either way the task rejects with a SandboxFailure whose message the uploader can read, and the next
 * task gets a fresh thread. The request loop only posts the bytes and receives the chunks.
 *
 * Plain worker_threads rather than piscina: each ingestion worker runs one file at a time, so a pool
 * would add a dependency for one thread per queue worker; what matters here — telling an out-of-memory
 * death from a timeout, terminating on abort, recycling after a crash — is a few lines either way.
 * A thread is kept between files (loading the parsers costs ~0.5 s) and ended after IDLE_MS unused.
 */
import { Worker } from 'node:worker_threads';
import { JobAbortedError } from '../../../platform/jobs.js';
import { ExtractionError } from './extract.js';
import type { PreparedDocument, PrepareTask } from './prepare.js';
import type { SandboxRequest, SandboxResponse } from './sandbox.worker.js';

export interface SandboxOptions {
  /** Old-generation heap of the thread, in MB. */
  heapMb: number;
  /** Wall-clock limit of one task (thread start included), in ms. */
  timeoutMs: number;
  /** An unused thread is ended after this long. */
  idleMs?: number;
}

/** The worker thread died or was stopped because of the file: not retried, the message is for the uploader. */
export class SandboxFailure extends Error {
  constructor(
    message: string,
    readonly reason: 'memory' | 'timeout' | 'crash',
  ) {
    super(message);
    this.name = 'SandboxFailure';
  }
}

const BOOT = new URL('./sandbox-boot.mjs', import.meta.url);
const ENTRY = new URL('./sandbox.worker.ts', import.meta.url).href;
const IDLE_MS = 60_000;

interface Pending {
  id: number;
  resolve: (doc: PreparedDocument) => void;
  reject: (err: Error) => void;
}

export class IngestSandbox {
  private worker: Worker | null = null;
  private ready: Promise<void> | null = null;
  private pending: Pending | null = null;
  private seq = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  /** Threads started so far (tests and logs). */
  started = 0;

  constructor(private readonly options: SandboxOptions) {}

  get busy(): boolean {
    return this.pending !== null;
  }

  /** Runs one task; one at a time per sandbox. */
  async run(task: PrepareTask, signal?: AbortSignal): Promise<PreparedDocument> {
    if (this.pending) throw new Error('IngestSandbox runs one task at a time');
    signal?.throwIfAborted();
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    const id = ++this.seq;
    // the bytes go to the thread without a copy on this side: a private buffer, transferred
    const bytes = new Uint8Array(task.bytes.byteLength);
    bytes.set(task.bytes);

    return new Promise<PreparedDocument>((resolve, reject) => {

      const settle = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.pending = null;
        this.scheduleIdleStop();
      };
      const onAbort = () => this.fail(new JobAbortedError('ingestion stopped'));
      this.pending = {
        id,
        resolve: (doc) => {
          settle();
          resolve(doc);
        },
        reject: (err) => {
          settle();
          reject(err);
        },
      };
      const timer = setTimeout(() => {
        const seconds = Math.round(this.options.timeoutMs / 100) / 10;
        this.fail(new SandboxFailure(`Text extraction took longer than ${seconds} s (INGEST_TIMEOUT_SECONDS) and was stopped; the file was not indexed`, 'timeout'));
      }, this.options.timeoutMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.start()
        .then(() => {
          if (this.pending?.id !== id || !this.worker) return;
          const request: SandboxRequest = { id, task: { ...task, bytes } };
          this.worker.postMessage(request, [bytes.buffer]);
        })
        .catch((err: unknown) => this.pending?.reject(err instanceof Error ? err : new Error(String(err))));
    });
  }

  /** Ends the thread (the running task, if any, fails). */
  async close(): Promise<void> {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    const w = this.worker;
    this.worker = null;
    this.ready = null;
    this.pending?.reject(new JobAbortedError('ingestion stopped'));
    if (w) await w.terminate();
  }

  private start(): Promise<void> {
    if (this.worker && this.ready) return this.ready;
    const worker = new Worker(BOOT, {
      workerData: { entry: ENTRY },
      resourceLimits: { maxOldGenerationSizeMb: this.options.heapMb, maxYoungGenerationSizeMb: Math.min(64, Math.max(8, this.options.heapMb / 8)) },
      stdout: false,
      stderr: false,
    });
    this.started++;
    this.worker = worker;
    let outOfMemory = false;
    this.ready = new Promise<void>((resolve, reject) => {
      worker.on('message', (msg: SandboxResponse | { ready: true }) => {
        if ('ready' in msg) return resolve();
        const p = this.pending;
        if (!p || p.id !== msg.id) return;
        if (msg.ok) p.resolve(msg.result);
        else if (msg.kind === 'file') p.reject(new ExtractionError(msg.message));
        else p.reject(new Error(msg.message));
      });
      worker.on('error', (err: Error & { code?: string }) => {
        if (err.code === 'ERR_WORKER_OUT_OF_MEMORY') outOfMemory = true;
        else if (this.pending) this.fail(new Error(`ingestion worker failed: ${err.message}`));
        reject(err);
      });
      worker.on('exit', (code) => {
        if (this.worker === worker) {
          this.worker = null;
          this.ready = null;
        }
        if (outOfMemory) {
          this.pending?.reject(
            new SandboxFailure(
              `Text extraction needed more than ${this.options.heapMb} MB of memory (INGEST_WORKER_HEAP_MB) and was stopped; the file was not indexed`,
              'memory',
            ),
          );
        } else if (this.pending) {
          this.pending.reject(new SandboxFailure(`The text extraction worker stopped unexpectedly (exit code ${code}); the file was not indexed`, 'crash'));
        }
        reject(new Error(`ingestion worker exited with code ${code}`));
      });
    });
    // a start failure is reported to the task; nobody else awaits this promise
    this.ready.catch(() => undefined);
    return this.ready;
  }

  /** Fails the running task and ends its thread (a fresh one serves the next task). */
  private fail(err: Error): void {
    const p = this.pending;
    this.kill();
    p?.reject(err);
  }

  private kill(): void {
    const w = this.worker;
    this.worker = null;
    this.ready = null;
    if (w) {
      w.removeAllListeners('exit');
      w.removeAllListeners('message');
      w.on('error', () => undefined);
      void w.terminate();
    }
  }

  private scheduleIdleStop(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      if (!this.pending) this.kill();
    }, this.options.idleMs ?? IDLE_MS);
    this.idleTimer.unref();
  }
}
