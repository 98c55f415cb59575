import { hostname } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { rowsOf, type Db, type DbOrTx } from '../db/client.js';
import { toDate } from '../db/values.js';
import { systemClock, type Clock } from '../shared/clock.js';
import { newId } from '../shared/ids.js';
import { Sleeper } from '../shared/sleeper.js';
import { storableText } from '../shared/storable-text.js';

/**
 * A durable job queue on the `jobs` table.
 *
 * Why not pg-boss (or graphile-worker): they need a pool of real connections and LISTEN/NOTIFY across
 * processes. The default database here is PGlite: one in-process connection that runs one query at a
 * time, with no cross-process notifications. This queue uses only plain SQL that both PGlite and
 * PostgreSQL run — a claim with `FOR UPDATE SKIP LOCKED` (several nodes never take the same job), a
 * short poll plus an in-process wake-up on enqueue, and a lease — so the same code is safe on one
 * embedded node and on many nodes sharing a PostgreSQL.
 *
 * Life of a job: pending → running (claimed: attempts + 1, locked_at/locked_by set, lease renewed by a
 * heartbeat) → done; or, when the handler throws, pending again at run_at = now + backoff while
 * attempts < max_attempts, else failed. A job left running by a dead process comes back: when its lease
 * (locked_at) is older than `leaseMs`, or at once when a worker starting on the same host sees that the
 * owning process is gone.
 */

export type JobStatus = 'pending' | 'running' | 'done' | 'failed';

export interface Job<P = Record<string, unknown>> {
  id: string;
  queue: string;
  payload: P;
  status: JobStatus;
  attempts: number;
  maxAttempts: number;
  runAt: Date;
  lockedAt: Date | null;
  lockedBy: string | null;
  lastError: string | null;
}

interface JobRowRaw {
  id: string;
  queue: string;
  payload: Record<string, unknown> | string;
  status: JobStatus;
  attempts: number;
  max_attempts: number;
  run_at: Date | string;
  locked_at: Date | string | null;
  locked_by: string | null;
  last_error: string | null;
}

function toJob(r: JobRowRaw): Job {
  return {
    id: r.id,
    queue: r.queue,
    payload: typeof r.payload === 'string' ? (JSON.parse(r.payload) as Record<string, unknown>) : r.payload,
    status: r.status,
    attempts: Number(r.attempts),
    maxAttempts: Number(r.max_attempts),
    runAt: toDate(r.run_at),
    lockedAt: toDate(r.locked_at),
    lockedBy: r.locked_by,
    lastError: r.last_error,
  };
}

export interface EnqueueOptions {
  /** Earliest start; defaults to now (pass the app clock's now so that tests with a ManualClock agree). */
  runAt?: Date;
  maxAttempts?: number;
  id?: string;
}

// ───────────── in-process wake-up ─────────────

const wakers = new Map<string, Set<() => void>>();

/**
 * Wakes the idle workers of a queue in this process at once instead of at their next poll. Call it
 * after the transaction that enqueued has committed (before that, the job is not visible to them).
 * Other nodes find the job at their next poll.
 */
export function notifyQueue(queue: string): void {
  for (const wake of wakers.get(queue) ?? []) wake();
}

/**
 * Adds a job. Pass the transaction that writes the record the job is about, so that both exist or
 * neither does. A wake-up is scheduled for local workers; call notifyQueue again after commit when
 * enqueueing inside a longer transaction.
 */
export async function enqueue(db: DbOrTx, queue: string, payload: Record<string, unknown>, options: EnqueueOptions = {}): Promise<string> {
  const id = options.id ?? newId();
  const runAt = options.runAt ?? new Date();
  await db.execute(
    sql`insert into jobs (id, queue, payload, status, attempts, max_attempts, run_at, created_at, updated_at)
        values (${id}, ${queue}, ${JSON.stringify(payload)}::jsonb, 'pending', 0, ${options.maxAttempts ?? 3}, ${runAt.toISOString()}, ${runAt.toISOString()}, ${runAt.toISOString()})`,
  );
  setImmediate(() => notifyQueue(queue));
  return id;
}

// ───────────── worker identity and liveness ─────────────

const HOST = hostname().replace(/\//g, '_');
/** Random per process: tells this process apart from an earlier one that had the same pid. */
const BOOT = randomBytes(4).toString('hex');
let workerSeq = 0;
/** locked_by tags of the workers alive in this process. */
const liveTags = new Set<string>();

interface Owner {
  host: string;
  pid: number;
  boot: string;
}

function parseOwner(tag: string): Owner | null {
  const [host, pid, boot] = tag.split('/');
  if (!host || !pid || !boot || !/^\d+$/.test(pid)) return null;
  return { host, pid: Number(pid), boot };
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Whether a job locked by `tag` is certainly orphaned: its owner ran on this host and is gone. */
function ownerIsDead(tag: string): boolean {
  const owner = parseOwner(tag);
  if (!owner || owner.host !== HOST) return false; // another host: only the lease can tell
  if (owner.pid === process.pid) return owner.boot !== BOOT || !liveTags.has(tag);
  return !processAlive(owner.pid);
}

// ───────────── worker ─────────────

export interface JobContext {
  job: Job;
  /** Aborted when the worker stops (after its grace period) or loses the job's lease. */
  signal: AbortSignal;
  /** 1-based number of this attempt. */
  attempt: number;
  /** True when a failure now would not be retried. */
  lastAttempt: boolean;
}

export type JobHandler = (payload: Record<string, unknown>, context: JobContext) => Promise<void>;

export interface WorkerLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface WorkerOptions {
  db: Db;
  queue: string;
  handler: JobHandler;
  log: WorkerLogger;
  clock?: Clock;
  /** Idle poll interval; enqueue in this process wakes the worker earlier. */
  pollIntervalMs?: number;
  /**
   * While the queue stays empty the interval doubles after each empty poll, up to this (default 8 ×
   * pollIntervalMs: 2 s), and falls back to pollIntervalMs once a job is claimed or a local enqueue wakes
   * the worker. Enqueues in this process are picked up at once whatever the interval; what waits longer
   * is a job enqueued by another node, or a retry coming due, on an idle queue (at most this long). Each
   * poll is a statement: on the embedded engine, one the requests queue behind.
   */
  idlePollMaxMs?: number;
  /** A running job whose lock is older than this is taken back. */
  leaseMs?: number;
  /** How often a running job renews its lease. */
  heartbeatMs?: number;
  /** How often stale jobs are looked for (also done at start). */
  sweepIntervalMs?: number;
  /** Delay before retry number `attempt` + 1. */
  backoffMs?: (attempt: number) => number;
  /** stop() lets a running job finish this long before aborting its signal. */
  stopGraceMs?: number;
  /** Finished jobs are deleted after this long. */
  retainDoneMs?: number;
  /** Called once a job has failed for good (handler errors or lost workers), e.g. to mark its record. */
  onGiveUp?: (job: Job, error: string) => Promise<void>;
}

/** Tries of the generic write that ends a run, and the pause before the second (then twice as long, ...). */
const END_WRITE_ATTEMPTS = 3;
const END_WRITE_PAUSE_MS = 500;

const defaultBackoff = (attempt: number) => Math.min(60_000, 1000 * 2 ** Math.max(0, attempt - 1));

/** Thrown inside a handler to say "stopped, not failed": the job is released without using an attempt. */
export class JobAbortedError extends Error {
  constructor(message = 'job aborted') {
    super(message);
    this.name = 'JobAbortedError';
  }
}

export class Worker {
  readonly tag: string;
  private readonly o: Required<Omit<WorkerOptions, 'onGiveUp' | 'clock'>> & Pick<WorkerOptions, 'onGiveUp'>;
  private readonly clock: Clock;
  private running = false;
  private stopping = false;
  private loopDone: Promise<void> = Promise.resolve();
  private readonly sleeper = new Sleeper();
  private current: { job: Job; abort: AbortController } | null = null;
  private lastSweep = 0;
  /** The current idle poll interval (see WorkerOptions.idlePollMaxMs). */
  private idleMs: number;

  constructor(options: WorkerOptions) {
    const leaseMs = options.leaseMs ?? 5 * 60_000;
    const pollIntervalMs = options.pollIntervalMs ?? 250;
    this.o = {
      heartbeatMs: Math.max(1000, Math.floor(leaseMs / 3)),
      sweepIntervalMs: 30_000,
      backoffMs: defaultBackoff,
      stopGraceMs: 10_000,
      retainDoneMs: 7 * 86_400_000,
      ...options,
      leaseMs,
      pollIntervalMs,
      idlePollMaxMs: Math.max(pollIntervalMs, options.idlePollMaxMs ?? 8 * pollIntervalMs),
    };
    this.idleMs = pollIntervalMs;
    this.clock = options.clock ?? systemClock;
    this.tag = `${HOST}/${process.pid}/${BOOT}/${++workerSeq}`;
  }

  get busy(): boolean {
    return this.current !== null;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.stopping = false;
    liveTags.add(this.tag);
    let set = wakers.get(this.o.queue);
    if (!set) wakers.set(this.o.queue, (set = new Set()));
    set.add(this.onWake);
    this.loopDone = this.loop();
  }

  /** Stops claiming; waits for the running job (aborting it after the grace period). */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.stopping = true;
    this.onWake();
    const grace = setTimeout(() => this.current?.abort.abort(new JobAbortedError('worker stopping')), this.o.stopGraceMs);
    await this.loopDone;
    clearTimeout(grace);
    wakers.get(this.o.queue)?.delete(this.onWake);
    liveTags.delete(this.tag);
    this.running = false;
  }

  // a wake-up that arrives while claiming or running makes the next sleep return at once
  private readonly onWake = () => {
    this.idleMs = this.o.pollIntervalMs;
    this.sleeper.wake();
  };

  private sleep(ms: number): Promise<void> {
    return this.stopping ? Promise.resolve() : this.sleeper.sleep(ms);
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      try {
        const now = this.clock.now().getTime();
        if (this.lastSweep === 0 || now - this.lastSweep >= this.o.sweepIntervalMs || now < this.lastSweep) {
          this.lastSweep = now;
          await this.sweep();
        }
        if (this.stopping) break;
        const job = await this.claim();
        if (!job) {
          const idle = this.idleMs;
          this.idleMs = Math.min(idle * 2, this.o.idlePollMaxMs);
          await this.sleep(idle);
          continue;
        }
        this.idleMs = this.o.pollIntervalMs;
        await this.run(job);
      } catch (err) {
        // The database being unreachable for a moment must not end the worker: log and retry later.
        if (this.stopping) break;
        this.o.log.error({ err, queue: this.o.queue }, 'job worker loop error');
        await this.sleep(Math.max(1000, this.o.pollIntervalMs));
      }
    }
  }

  /** Takes the oldest due job of the queue, skipping those another worker holds. */
  async claim(): Promise<Job | null> {
    const now = this.clock.now().toISOString();
    const [row] = await rowsOf<JobRowRaw>(
      this.o.db,
      sql`update jobs set status = 'running', locked_at = ${now}, locked_by = ${this.tag}, attempts = attempts + 1, updated_at = ${now}
           where id = (select id from jobs
                        where queue = ${this.o.queue} and status = 'pending' and run_at <= ${now}
                        order by run_at, id
                        for update skip locked
                        limit 1)
       returning *`,
    );
    return row ? toJob(row) : null;
  }

  private async run(job: Job): Promise<void> {
    const abort = new AbortController();
    const heartbeat = setInterval(() => {
      void this.renewLease(job).then(
        (held) => {
          if (!held) abort.abort(new JobAbortedError('lease lost'));
        },
        (err: unknown) => this.o.log.warn({ err, jobId: job.id }, 'job heartbeat failed'),
      );
    }, this.o.heartbeatMs);
    heartbeat.unref?.();

    const work = (async () => {
      let outcome: { ok: true } | { ok: false; err: unknown };
      try {
        await this.o.handler(job.payload, { job, signal: abort.signal, attempt: job.attempts, lastAttempt: job.attempts >= job.maxAttempts });
        outcome = { ok: true };
      } catch (err) {
        outcome = { ok: false, err };
      }
      try {
        if (outcome.ok) {
          await this.endWrite(job, 'done', () => this.finish(job, 'done', null));
          return;
        }
        const err = outcome.err;
        if (err instanceof JobAbortedError || abort.signal.aborted) {
          await this.endWrite(job, 'release', () => this.release(job));
          this.o.log.info({ jobId: job.id, queue: job.queue, reason: (err as Error).message }, 'job released');
          return;
        }
        const message = storableText(err instanceof Error ? err.message : String(err));
        if (job.attempts < job.maxAttempts) {
          const runAt = new Date(this.clock.now().getTime() + this.o.backoffMs(job.attempts));
          await this.endWrite(job, 'retry', (fallback) => this.retry(job, fallback ?? message, runAt));
          this.o.log.warn({ err, jobId: job.id, queue: job.queue, attempt: job.attempts }, 'job failed; will retry');
        } else {
          await this.endWrite(job, 'fail', (fallback) => this.finish(job, 'failed', fallback ?? message));
          this.o.log.error({ err, jobId: job.id, queue: job.queue, attempt: job.attempts }, 'job failed for good');
          await this.giveUp(job, message);
        }
      } finally {
        clearInterval(heartbeat);
      }
    })();
    this.current = { job, abort };
    try {
      await work;
    } finally {
      this.current = null;
    }
  }

  private async renewLease(job: Job): Promise<boolean> {
    const now = this.clock.now().toISOString();
    const rows = await rowsOf<{ id: string }>(
      this.o.db,
      sql`update jobs set locked_at = ${now}, updated_at = ${now} where id = ${job.id} and status = 'running' and locked_by = ${this.tag} returning id`,
    );
    return rows.length > 0;
  }

  /**
   * The write that ends a run (done, retry, failed, release). A job whose end is not written stays
   * 'running' with nobody working on it until its lease expires — and then counts as a lost worker — so a
   * failed write is tried again: at once with a generic error message in place of the job's own (what
   * the database refused may be in it: storableText removes what is known to be refused, this covers the
   * rest), then a few more times after a short pause (the database may be away for a moment). When every
   * try fails the error is thrown (the worker loop logs it) and the lease, as for a dead worker, brings the
   * job back.
   */
  private async endWrite(job: Job, what: string, write: (fallback?: string) => Promise<void>): Promise<void> {
    try {
      await write();
      return;
    } catch (err) {
      this.o.log.warn({ err, jobId: job.id, queue: job.queue }, `recording the job's end (${what}) failed; trying again (with a generic error message if it had one)`);
    }
    const fallback = `the job's error could not be recorded (${what})`;
    for (let attempt = 1; ; attempt++) {
      try {
        await write(fallback);
        return;
      } catch (err) {
        if (attempt >= END_WRITE_ATTEMPTS) throw err;
        this.o.log.warn({ err, jobId: job.id, queue: job.queue, attempt }, `recording the job's end (${what}) failed again`);
        await delay(END_WRITE_PAUSE_MS * attempt);
      }
    }
  }

  /**
   * Every end-of-job write checks the lock is still ours: a job taken back by another node is theirs now.
   * `error` is written as given: the run's caller made it storable (storableText).
   */
  private async finish(job: Job, status: 'done' | 'failed', error: string | null): Promise<void> {
    const now = this.clock.now().toISOString();
    await this.o.db.execute(
      sql`update jobs set status = ${status}, last_error = coalesce(${error}, last_error), locked_at = null, updated_at = ${now}
           where id = ${job.id} and locked_by = ${this.tag} and status = 'running'`,
    );
  }

  private async retry(job: Job, error: string, runAt: Date): Promise<void> {
    const now = this.clock.now().toISOString();
    await this.o.db.execute(
      sql`update jobs set status = 'pending', last_error = ${error}, run_at = ${runAt.toISOString()}, locked_at = null, locked_by = null, updated_at = ${now}
           where id = ${job.id} and locked_by = ${this.tag} and status = 'running'`,
    );
  }

  /** Back to pending, and the attempt it used is returned: stopping is not the job's fault. */
  private async release(job: Job): Promise<void> {
    const now = this.clock.now().toISOString();
    await this.o.db.execute(
      sql`update jobs set status = 'pending', attempts = greatest(0, attempts - 1), run_at = ${now}, locked_at = null, locked_by = null, updated_at = ${now}
           where id = ${job.id} and locked_by = ${this.tag} and status = 'running'`,
    );
  }

  private async giveUp(job: Job, error: string): Promise<void> {
    if (!this.o.onGiveUp) return;
    try {
      await this.o.onGiveUp(job, error);
    } catch (err) {
      this.o.log.error({ err, jobId: job.id }, 'onGiveUp handler failed');
    }
  }

  /**
   * Takes back jobs whose worker is gone (lease expired, or owner process on this host no longer
   * alive), and deletes old finished jobs. Several nodes may sweep at once: each row is updated by
   * one of them only (the status condition is re-checked under the row lock).
   */
  async sweep(): Promise<number> {
    const now = this.clock.now();
    const staleBefore = new Date(now.getTime() - this.o.leaseMs).toISOString();
    const owners = await rowsOf<{ locked_by: string }>(
      this.o.db,
      sql`select distinct locked_by from jobs where queue = ${this.o.queue} and status = 'running' and locked_by is not null`,
    );
    const dead = owners.map((r) => r.locked_by).filter(ownerIsDead);
    const deadList = dead.length ? sql`or locked_by in (${sql.join(dead.map((d) => sql`${d}`), sql`, `)})` : sql``;
    const taken = await rowsOf<JobRowRaw>(
      this.o.db,
      sql`update jobs
             set status = case when attempts >= max_attempts then 'failed' else 'pending' end,
                 last_error = coalesce(last_error || ' / ', '') || 'worker lost (' || coalesce(locked_by, '?') || ')',
                 run_at = ${now.toISOString()}, locked_at = null, locked_by = null, updated_at = ${now.toISOString()}
           where queue = ${this.o.queue} and status = 'running' and (locked_at < ${staleBefore} ${deadList})
       returning *`,
    );
    for (const row of taken) {
      const job = toJob(row);
      this.o.log.warn({ jobId: job.id, queue: job.queue, status: job.status }, 'took back a job from a lost worker');
      if (job.status === 'failed') await this.giveUp(job, job.lastError ?? 'worker lost');
    }
    if (this.o.retainDoneMs > 0) {
      const before = new Date(now.getTime() - this.o.retainDoneMs).toISOString();
      await this.o.db.execute(sql`delete from jobs where queue = ${this.o.queue} and status = 'done' and updated_at < ${before}`);
    }
    return taken.length;
  }
}
