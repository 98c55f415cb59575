import { sql } from 'drizzle-orm';
import type { FastifyBaseLogger } from 'fastify';
import { waitForQuiet, type EngineActivity, type GiveWay } from '../../db/activity.js';
import type { Db } from '../../db/client.js';
import { isLockConflict, sqlState } from '../../db/errors.js';
import { Sleeper } from '../../shared/sleeper.js';
import { countStagedVectors, drainStagedVectors } from './search.repository.js';
import { yieldToLoop } from '../../shared/slices.js';

export interface VectorDrainOptions {
  /**
   * Vectors moved per statement. An HNSW insert costs 3–7 ms a row on the embedded engine, which runs
   * one statement at a time for the whole app: a request's statement that arrives meanwhile waits for it.
   * 8 (~40–50 ms): with 2, searches during a drain were about as fast (p50 57 against 62 ms at 12k staged
   * vectors) but the drain took 2.6 times as long once the index held ~20k vectors (151 s against 57 s for
   * 6,420: `npm run bench -- --only search,ingest`).
   */
  batch: number;
  /**
   * The embedded engine: the app's activity, which the drain gives way to. Before each statement it waits
   * until the app has left the engine alone for `quietMs`, but no longer than `maxWaitMs` (under a steady
   * load it still moves a batch that often). Without it (PostgreSQL runs statements side by side) the
   * drain moves batch after batch.
   */
  giveWay?: GiveWay & { activity: EngineActivity };
  /** How long to wait when nothing is staged (another node's ingestion may stage some). */
  idleMs: number;
  /**
   * While an ingestion writes (hold()), the drain waits, so the engine writes the file first; beyond
   * this many staged vectors it drains anyway, so the exact part of every search stays bounded.
   */
  backlogCap: number;
  /**
   * PGlite has no autovacuum: each time the staging table has been emptied after moving at least
   * MAINTAIN_AFTER vectors, it is vacuumed here and chunk_vectors' planner statistics are refreshed.
   */
  vacuum: boolean;
  /**
   * PostgreSQL: how long a move may wait for a table lock (a re-embed's index build holds chunk_vectors
   * for minutes). Beyond it the batch gives up and is tried again after idleMs. PGlite runs one statement
   * at a time: no wait to bound.
   */
  lockTimeoutMs?: number;
}

export const DEFAULT_VECTOR_DRAIN: Omit<VectorDrainOptions, 'vacuum' | 'lockTimeoutMs' | 'giveWay'> = { batch: 8, idleMs: 1000, backlogCap: 20_000 };
/** PostgreSQL's bound on a move's wait for a table lock (VectorDrainOptions.lockTimeoutMs). */
export const VECTOR_DRAIN_LOCK_TIMEOUT_MS = 1000;

const MAINTAIN_AFTER = 200;
/** While held, the backlog is counted at most this often (a count reads the whole staging table); in between it is estimated. */
const RECOUNT_MS = 1000;

/**
 * Moves staged vectors (written by ingestion into chunk_vectors_staged) into the HNSW index, in small
 * batches, in the background of every node. Until a vector is moved, every search compares it exactly
 * (search.repository's denseSearch), so nothing waits for this: it turns exact comparisons into index
 * lookups. Started when the app is ready, stopped (after its statement in flight) before the database
 * closes; staged vectors left at a stop are drained after the next start.
 */
export class VectorDrain {
  private holds = 0;
  private running = false;
  private loop: Promise<void> | undefined;
  private readonly sleeper = new Sleeper();
  private movedSinceVacuum = 0;
  /** Staged vectors at the last count, less what was moved since. */
  private backlog = 0;
  private countedAt = Number.NEGATIVE_INFINITY;
  /** Vectors this node moved into the index since it started. */
  moved = 0;
  /** Times the drain waited for the app to leave the engine alone (giveWay). */
  yielded = 0;

  constructor(
    private readonly db: Db,
    private readonly log: FastifyBaseLogger,
    private readonly options: VectorDrainOptions,
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.sleeper.wake();
    await this.loop;
    this.loop = undefined;
  }

  /** Asks the drain to wait while the caller writes (see backlogCap); call the returned function when done. */
  hold(): () => void {
    this.holds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.holds--;
      this.sleeper.wake();
    };
  }

  private sleep(ms: number): Promise<void> {
    return this.running ? this.sleeper.sleep(ms) : Promise.resolve();
  }

  /** Whether the backlog is under the cap (only asked while held): recounted at most every RECOUNT_MS. */
  private async underCap(): Promise<boolean> {
    if (performance.now() - this.countedAt >= RECOUNT_MS) {
      this.backlog = await countStagedVectors(this.db);
      this.countedAt = performance.now();
    }
    return this.backlog < this.options.backlogCap;
  }

  /** Waits until the app has left the engine alone (VectorDrainOptions.giveWay). */
  private async giveWay(): Promise<void> {
    const giveWay = this.options.giveWay;
    if (!giveWay) return;
    await waitForQuiet(
      giveWay.activity,
      giveWay,
      (ms) => {
        this.yielded++;
        return this.sleep(ms);
      },
      () => !this.running,
    );
  }

  private async run(): Promise<void> {
    /** the last batch moved vectors (the next one skips the idle check) */
    let busy = false;
    while (this.running) {
      try {
        if (this.holds > 0 && (await this.underCap())) {
          await this.sleep(250);
          continue;
        }
        await this.giveWay();
        if (!this.running) break;
        const moved = await drainStagedVectors(this.db, this.options.batch, { lockTimeoutMs: this.options.lockTimeoutMs, idleCheck: !busy });
        busy = moved > 0;
        if (!this.running) break;
        if (moved === 0) {
          if (this.options.vacuum && this.movedSinceVacuum >= MAINTAIN_AFTER) {
            this.movedSinceVacuum = 0;
            await this.giveWay();
            await this.db.execute(sql`vacuum chunk_vectors_staged`);
            await this.db.execute(sql`analyze chunk_vectors (chunk_id, upload_id)`);
            if (!this.running) break;
          }
          await this.sleep(this.options.idleMs);
          continue;
        }
        this.moved += moved;
        this.backlog -= moved;
        this.movedSinceVacuum += moved;
        // a turn of the event loop between statements: queries of requests get their turn in the engine
        await yieldToLoop();
      } catch (err) {
        if (!this.running) break;
        if (isLockConflict(err)) {
          // another transaction holds the tables (a re-embed): not a failure, a turn to wait
          this.log.info({ code: sqlState(err) }, 'the vector tables are busy; moving staged vectors later');
          await this.sleep(this.options.idleMs);
          continue;
        }
        this.log.error({ err }, 'moving staged vectors into the HNSW index failed; retrying in 5 s');
        await this.sleep(5000);
      }
    }
  }
}
