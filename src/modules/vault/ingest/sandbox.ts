/**
 * Where the CPU work of ingesting a file runs (prepare.ts: extract, chunk, local embeddings): a child
 * process of this one, never the request loop, with
 * - a heap limit (`--max-old-space-size` = INGEST_WORKER_HEAP_MB): a file that needs more kills that
 *   process only;
 * - a wall-clock limit per file (INGEST_TIMEOUT_SECONDS): past it the process is killed;
 * - the parsers' own bounds (zip.ts, extract.ts), which refuse most hostile files before they cost much.
 * Either way the task rejects with a SandboxFailure whose message the uploader can read, and the next
 * task gets a fresh process. The process is kept between files (starting it and loading the parsers
 * costs about a second) and ended after IDLE_MS unused, or with its parent.
 *
 * Why a process and not a worker thread (node:worker_threads or piscina): a thread's `resourceLimits`
 * are best-effort. Measured here on Node 20: a worker with maxOldGenerationSizeMb 128 given a DOCX that
 * inflates to 250 MB did not get ERR_WORKER_OUT_OF_MEMORY; V8 aborted the WHOLE process ("FATAL ERROR:
 * Reached heap limit"), which is nodejs/node#47224 (open) — exactly the failure this must prevent.
 * A separate process is the only heap limit that cannot take the API down.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { JobAbortedError } from '../../../platform/jobs.js';
import { siblingModule } from '../../../shared/sibling-module.js';
import { ExtractionError } from './formats.js';
import type { PreparedDocument, PrepareTask } from './prepare.js';
import type { SandboxPart, SandboxRequest, SandboxResponse } from './sandbox.process.js';

export interface SandboxOptions {
  /** Old-generation heap of the sandbox process, in MB. */
  heapMb: number;
  /** Wall-clock limit of one task (process start not included), in ms. */
  timeoutMs: number;
  /** An unused process is ended after this long. */
  idleMs?: number;
  /** Limit of the process start (loading the parsers), in ms. */
  startTimeoutMs?: number;
}

/** The sandbox died or was stopped because of the file: not retried, the message is for the uploader. */
export class SandboxFailure extends Error {
  constructor(
    message: string,
    readonly reason: 'memory' | 'timeout' | 'crash',
  ) {
    super(message);
    this.name = 'SandboxFailure';
  }
}

/**
 * From TypeScript sources (tsx) the child first registers tsx's loader (sandbox-boot.mjs), then loads
 * the entry; from the built JavaScript (`npm run build`, dist/) it runs the entry itself.
 */
const ENTRY = siblingModule(import.meta.url, 'sandbox.process');
const FORK_ARGS: [string, string[]] = ENTRY.fromSource
  ? [fileURLToPath(new URL('./sandbox-boot.mjs', import.meta.url)), [ENTRY.url.href]]
  : [fileURLToPath(ENTRY.url), []];
const IDLE_MS = 60_000;
const START_TIMEOUT_MS = 60_000;

interface Pending {
  id: number;
  /** Parts of the result received so far (see SandboxPart). */
  parts: SandboxPart['part'][];
  resolve: (doc: PreparedDocument) => void;
  reject: (err: Error) => void;
}

/** The document with the chunks and vectors of its parts, in order. */
function assemble(head: PreparedDocument, parts: SandboxPart['part'][]): PreparedDocument {
  const chunks = parts.flatMap((p) => p.chunks);
  if (!head.vectors) return { ...head, chunks };
  const vectors = new Float64Array(parts.reduce((n, p) => n + (p.vectors?.length ?? 0), 0));
  let at = 0;
  for (const p of parts) {
    if (!p.vectors) continue;
    vectors.set(p.vectors, at);
    at += p.vectors.length;
  }
  return { ...head, chunks, vectors };
}

export class IngestSandbox {
  private child: ChildProcess | null = null;
  private ready: Promise<void> | null = null;
  private pending: Pending | null = null;
  private seq = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  /** Processes started so far (tests and logs). */
  started = 0;

  constructor(private readonly options: SandboxOptions) {}

  get busy(): boolean {
    return this.pending !== null;
  }

  /** The pid of the sandbox process while one runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Runs one task; one at a time per sandbox. */
  async run(task: PrepareTask, signal?: AbortSignal): Promise<PreparedDocument> {
    if (this.pending) throw new Error('IngestSandbox runs one task at a time');
    signal?.throwIfAborted();
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    const id = ++this.seq;

    return new Promise<PreparedDocument>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const settle = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.pending = null;
        this.hold(false);
        this.scheduleIdleStop();
      };
      const onAbort = () => this.fail(new JobAbortedError('ingestion stopped'));
      this.pending = {
        id,
        parts: [],
        resolve: (doc) => {
          settle();
          resolve(doc);
        },
        reject: (err) => {
          settle();
          reject(err);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.start()
        .then(() => {
          if (this.pending?.id !== id || !this.child) return;
          this.hold(true);
          timer = setTimeout(() => {
            const seconds = this.options.timeoutMs / 1000;
            this.fail(new SandboxFailure(`Text extraction took longer than ${seconds} s (INGEST_TIMEOUT_SECONDS) and was stopped; the file was not indexed`, 'timeout'));
          }, this.options.timeoutMs);
          const request: SandboxRequest = { id, task };
          this.child.send(request);
        })
        .catch((err: unknown) => this.pending?.id === id && this.fail(err instanceof Error ? err : new Error(String(err))));
    });
  }

  /** Ends the process (the running task, if any, is aborted). */
  async close(): Promise<void> {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    const child = this.child;
    this.fail(new JobAbortedError('ingestion stopped'));
    if (child && child.exitCode === null && child.signalCode === null) await new Promise((resolve) => child.once('exit', resolve));
  }

  private start(): Promise<void> {
    if (this.child && this.ready) return this.ready;
    const child = fork(FORK_ARGS[0], FORK_ARGS[1], {
      execArgv: [`--max-old-space-size=${this.options.heapMb}`],
      serialization: 'advanced',
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    this.started++;
    this.child = child;
    this.hold(false);
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    this.ready = new Promise<void>((resolve, reject) => {
      const startTimer = setTimeout(() => reject(new Error('the ingestion sandbox did not start in time')), this.options.startTimeoutMs ?? START_TIMEOUT_MS);
      child.on('message', (msg: SandboxResponse | SandboxPart | { ready: true }) => {
        if ('ready' in msg) {
          clearTimeout(startTimer);
          return resolve();
        }
        const p = this.pending;
        if (!p || p.id !== msg.id) return;
        if ('part' in msg) return void p.parts.push(msg.part);
        if (!msg.ok) return p.reject(msg.kind === 'file' ? new ExtractionError(msg.message) : new Error(msg.message));
        if (p.parts.length !== msg.parts) return p.reject(new Error(`the ingestion sandbox sent ${p.parts.length} of ${msg.parts} parts`));
        p.resolve(assemble(msg.result, p.parts));
      });
      child.on('error', (err) => {
        clearTimeout(startTimer);
        reject(err);
      });
      child.on('exit', (code, signal) => {
        clearTimeout(startTimer);
        if (this.child === child) {
          this.child = null;
          this.ready = null;
        }
        const p = this.pending;
        if (p) {
          if (/heap out of memory|Reached heap limit|Allocation failed/i.test(stderr)) {
            p.reject(
              new SandboxFailure(
                `Text extraction needed more than ${this.options.heapMb} MB of memory (INGEST_WORKER_HEAP_MB) and was stopped; the file was not indexed`,
                'memory',
              ),
            );
          } else {
            p.reject(new SandboxFailure(`The text extraction process stopped unexpectedly (${signal ?? `exit code ${code}`}); the file was not indexed`, 'crash'));
          }
        }
        reject(new Error(`ingestion sandbox exited (${signal ?? code}) ${stderr.slice(-500)}`));
      });
    });
    // a start failure is reported to the task; nobody else awaits this promise
    this.ready.catch(() => undefined);
    return this.ready;
  }

  /** Fails the running task and ends the process (a fresh one serves the next task). */
  private fail(err: Error): void {
    const p = this.pending;
    this.kill();
    p?.reject(err);
  }

  private kill(): void {
    const child = this.child;
    this.child = null;
    this.ready = null;
    if (child) {
      child.removeAllListeners('message');
      child.removeAllListeners('exit');
      child.on('error', () => undefined);
      child.kill('SIGKILL');
    }
  }

  /** An idle sandbox does not keep this process alive; a busy one does. */
  private hold(busy: boolean): void {
    const child = this.child;
    if (!child) return;
    const channel = (child as ChildProcess & { channel?: { ref(): void; unref(): void } }).channel;
    if (busy) {
      child.ref();
      channel?.ref();
    } else {
      child.unref();
      channel?.unref();
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
