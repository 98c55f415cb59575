import type { FastifyBaseLogger } from 'fastify';
import { Counter } from 'prom-client';
import type { AppContext } from '../../context.js';
import type { Db } from '../../db/client.js';
import type { App } from '../../http/types.js';
import { BlobNotFoundError, type BlobStorage, type StoredBlob } from '../../providers/storage/index.js';
import { anyUploadRecorded, databaseStorageOwner, referencedStorageKeys } from './uploads.repository.js';

/**
 * How long a stored file no upload references is left alone. An upload's bytes are stored before its row
 * is inserted (uploads.service create: the put, then the transaction), on this node or on another one
 * sharing the storage; a put's temporary file is written as the bytes arrive. A file's age counts from its
 * last byte written (the mtime; an object store's LastModified), so the time a client takes to send a large
 * file does not count, only what comes after it: the rename and the row's transaction, seconds (minutes
 * when uploads of one institution queue on its row lock). An hour is far beyond that, and beyond the clock
 * skew between nodes and a shared volume; an orphan costing its bytes an hour longer costs nothing.
 */
export const ORPHAN_FILE_GRACE_MS = 60 * 60 * 1000;
/** The node's first sweep comes this long after it is ready (out of the way of start-up: embedder check, index warming). */
export const FILE_SWEEP_FIRST_DELAY_MS = 60 * 1000;
/** Keys checked against the database by one statement (a listing page). */
export const FILE_SWEEP_PAGE = 500;
/** Removals in flight at once. */
const DELETE_CONCURRENCY = 8;

export type OrphanOutcome = 'removed' | 'kept' | 'failed';

export interface OrphanSweepOptions {
  /** Find and report, remove nothing. */
  dryRun?: boolean;
  graceMs?: number;
  pageSize?: number;
  /** Stops the pass between pages (the node shuts down). */
  signal?: AbortSignal;
  /** Waited for before each statement: on the embedded engine, until requests leave it alone (db/activity.ts). */
  giveWay?: () => Promise<void>;
  /**
   * The wall clock, in epoch ms, that file times are compared with: the storage's clock, not the app's
   * (tests move the app's clock; a file's mtime stays where the file system put it).
   */
  now?: () => number;
  /** Told of each orphan: removed, kept (a dry run), or failed (with its error: the next pass tries again). */
  onOrphan?: (file: StoredBlob, outcome: OrphanOutcome, err?: unknown) => void;
}

export interface OrphanSweepResult {
  /** Stored objects listed. */
  listed: number;
  /** Objects no upload references (or that only a deleted upload does), older than the grace period, and their bytes. */
  orphans: number;
  orphanBytes: number;
  /** Of those, removed (none in a dry run) and their bytes; and those whose removal failed. */
  removed: number;
  removedBytes: number;
  failed: number;
  /** Why the pass removed nothing and looked no further (storageOwnership): set only then. */
  refused?: string;
}

/**
 * The storage object naming the database whose uploads the storage holds: `{"database": "<id>"}`, the id of
 * databaseStorageOwner. A flat key, never an upload's (uploadKey's are under `uploads/`), and never swept.
 */
export const STORAGE_OWNER_KEY = 'storage-owner';

/**
 * Whether this database may sweep this storage: undefined when it may, else why not. A sweep removes what its
 * database does not reference, so a node pointed at another database (a new DATABASE_URL, the database of
 * another data directory) with the same files would remove every file older than the grace period. The storage is
 * therefore marked with the id of the database that swept it first (STORAGE_OWNER_KEY), and a database with
 * another id sweeps nothing. An unmarked storage is claimed by the first sweep (an exclusive create: of two
 * databases claiming it at the same moment one wins, and the other sweeps nothing), unless this database holds no
 * upload row at all while the storage holds files: an empty database facing stored files is the mistake this
 * guards against, not a database whose files are all gone (their rows stay as `deleted`). A dry run claims nothing.
 */
async function storageOwnership(db: Db, storage: BlobStorage, dryRun: boolean): Promise<string | undefined> {
  const owner = await databaseStorageOwner(db, new Date());
  const marked = await storageMark(storage);
  if (marked === owner) return undefined;
  if (marked !== undefined) return ownedByAnother(marked, owner);
  if (!(await anyUploadRecorded(db)) && (await holdsFiles(storage))) {
    return 'this database has no upload at all while the file storage holds files (another database\'s?): nothing is removed';
  }
  if (dryRun) return undefined;
  // exclusive: another database's node may be claiming the unmarked storage at this moment; the first claim stands
  if (await storage.putIfAbsent(STORAGE_OWNER_KEY, Buffer.from(JSON.stringify({ database: owner })))) return undefined;
  const winner = await storageMark(storage);
  return winner === owner ? undefined : ownedByAnother(winner ?? '(removed while it was claimed)', owner);
}

const ownedByAnother = (marked: string, owner: string) =>
  `the file storage belongs to another database (its ${STORAGE_OWNER_KEY} names ${marked}; this database is ${owner}): ` +
  `nothing is removed. If this database really is the one the files belong to, remove the storage's ${STORAGE_OWNER_KEY}`;

/** The database id the storage's mark names (a description of it when it is unreadable), or undefined when it has none. */
async function storageMark(storage: BlobStorage): Promise<string | undefined> {
  try {
    const text = (await storage.getBuffer(STORAGE_OWNER_KEY)).toString('utf8');
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const database = (parsed as { database?: unknown } | undefined)?.database;
    return typeof database === 'string' ? database : `(unreadable: ${JSON.stringify(text.slice(0, 80))})`;
  } catch (err) {
    if (err instanceof BlobNotFoundError) return undefined;
    throw err;
  }
}

/** Whether the storage holds anything besides its owner mark (its first page is enough). */
async function holdsFiles(storage: BlobStorage): Promise<boolean> {
  for await (const page of storage.list({ pageSize: 2 })) return page.some((f) => f.key !== STORAGE_OWNER_KEY);
  return false;
}

/**
 * One pass over the blob storage: removes the stored files that no upload references, last written more
 * than the grace period ago. They are left behind when a deletion (DELETE /api/user/files/{id}, or of a
 * user, institution or account) commits and its process dies, or its removal of the bytes fails, before
 * the bytes are gone; or when an upload's row is never inserted after its bytes were stored. A put's
 * temporary file that old is an upload abandoned mid-write: removed too. The listing is read a page at a
 * time, each page checked by one statement. Safe on several nodes at once: an object another node removed
 * first is not an error (it is counted by both).
 */
export async function sweepOrphanFiles(db: Db, storage: BlobStorage, options: OrphanSweepOptions = {}): Promise<OrphanSweepResult> {
  const graceMs = options.graceMs ?? ORPHAN_FILE_GRACE_MS;
  const now = options.now ?? Date.now;
  const result: OrphanSweepResult = { listed: 0, orphans: 0, orphanBytes: 0, removed: 0, removedBytes: 0, failed: 0 };
  await options.giveWay?.();
  const refused = await storageOwnership(db, storage, options.dryRun === true);
  if (refused) return { ...result, refused };
  for await (const listed of storage.list({ pageSize: options.pageSize ?? FILE_SWEEP_PAGE })) {
    if (options.signal?.aborted) break;
    const page = listed.filter((f) => f.key !== STORAGE_OWNER_KEY);
    result.listed += page.length;
    // the files' times were read before this: one written after the cutoff is young, whatever happened since
    const cutoff = now() - graceMs;
    const old = page.filter((f) => f.modifiedAt.getTime() <= cutoff);
    if (old.length === 0) continue;
    await options.giveWay?.();
    if (options.signal?.aborted) break;
    // a put's temporary file is asked about too: keys are opaque, one could look like a temporary name
    const referenced = await referencedStorageKeys(db, old.map((f) => f.key));
    const orphans = old.filter((f) => !referenced.has(f.key));
    for (let i = 0; i < orphans.length; i += DELETE_CONCURRENCY) {
      await Promise.all(
        orphans.slice(i, i + DELETE_CONCURRENCY).map(async (file) => {
          result.orphans++;
          result.orphanBytes += file.size;
          if (options.dryRun) return options.onOrphan?.(file, 'kept');
          try {
            await storage.delete(file.key);
          } catch (err) {
            result.failed++;
            return options.onOrphan?.(file, 'failed', err);
          }
          result.removed++;
          result.removedBytes += file.size;
          options.onOrphan?.(file, 'removed');
        }),
      );
    }
  }
  return result;
}

export interface FileSweepSchedule {
  /** Between passes; 0: no pass unless asked (run()). */
  intervalMs: number;
  /** Before the first pass after start(). */
  firstDelayMs: number;
  graceMs?: number;
}

/**
 * The node's sweep of stored files no upload references (sweepOrphanFiles): shortly after the app is
 * ready, then every FILE_SWEEP_INTERVAL_HOURS; stopped (between two pages) when the shutdown begins. Every
 * node sweeps the shared storage on its own schedule: passes of two nodes may overlap, harmlessly.
 */
export class OrphanFileSweep {
  private first: NodeJS.Timeout | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<OrphanSweepResult | undefined> | undefined;
  private readonly stopping = new AbortController();
  /** Passes this node finished (a failed one included). */
  passes = 0;

  constructor(
    private readonly deps: { db: Db; storage: BlobStorage; log: FastifyBaseLogger; giveWay?: () => Promise<void>; removed?: (files: number, bytes: number) => void },
    private readonly schedule: FileSweepSchedule,
  ) {}

  start(): void {
    if (this.first || this.timer || this.schedule.intervalMs <= 0 || this.stopping.signal.aborted) return;
    this.first = setTimeout(() => void this.run(), this.schedule.firstDelayMs).unref();
    this.timer = setInterval(() => void this.run(), this.schedule.intervalMs).unref();
  }

  /** Ends the schedule, stops a pass in flight after its page, and waits for it. */
  async stop(): Promise<void> {
    clearTimeout(this.first);
    clearInterval(this.timer);
    this.stopping.abort();
    await this.running;
  }

  /** One pass (a pass already running is not started twice); undefined when it failed (logged). */
  run(): Promise<OrphanSweepResult | undefined> {
    this.running ??= this.pass().finally(() => {
      this.running = undefined;
      this.passes++;
    });
    return this.running;
  }

  private async pass(): Promise<OrphanSweepResult | undefined> {
    const { log } = this.deps;
    try {
      const result = await sweepOrphanFiles(this.deps.db, this.deps.storage, {
        graceMs: this.schedule.graceMs,
        signal: this.stopping.signal,
        giveWay: this.deps.giveWay,
        onOrphan: (file, outcome, err) => {
          if (outcome === 'failed') log.warn({ err, key: file.key }, 'could not remove a stored file no upload references; trying again at the next sweep');
        },
      });
      if (result.refused) log.error(`the sweep of stored files no upload references refused: ${result.refused}`);
      if (result.removed > 0) {
        this.deps.removed?.(result.removed, result.removedBytes);
        log.info({ removed: result.removed, bytes: result.removedBytes, listed: result.listed, failed: result.failed }, 'removed stored files no upload references');
      }
      return result;
    } catch (err) {
      log.error({ err }, 'the sweep of stored files no upload references failed; trying again at the next sweep');
      return undefined;
    }
  }
}

/**
 * This node's sweep (app.fileSweep), scheduled from when the app is ready, stopped when the shutdown
 * begins; on the embedded engine its statements give way to requests. Counted in /metrics.
 */
export function registerFileSweep(app: App, ctx: AppContext): OrphanFileSweep {
  const files = new Counter({ name: 'vault_orphan_files_removed_total', help: 'Stored files no upload referenced, removed by this node\'s sweep', registers: [app.metrics] });
  const bytes = new Counter({ name: 'vault_orphan_file_bytes_removed_total', help: 'Bytes of the stored files this node\'s sweep removed', registers: [app.metrics] });
  const background = ctx.database.background;
  const sweep = new OrphanFileSweep(
    {
      db: background?.db ?? ctx.db,
      storage: ctx.providers.storage,
      log: ctx.log,
      ...(background ? { giveWay: background.giveWay } : {}),
      removed: (n, b) => {
        files.inc(n);
        bytes.inc(b);
      },
    },
    { intervalMs: ctx.config.fileSweepIntervalHours * 60 * 60 * 1000, firstDelayMs: FILE_SWEEP_FIRST_DELAY_MS },
  );
  app.decorate('fileSweep', sweep);
  app.addHook('onReady', async () => sweep.start());
  ctx.shutdown.closing.addEventListener('abort', () => void sweep.stop(), { once: true });
  app.addHook('preClose', () => sweep.stop());
  return sweep;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** This node's sweep of stored files no upload references (vault/orphan-files.ts). */
    fileSweep: OrphanFileSweep;
  }
}
