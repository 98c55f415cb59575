import { randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { migrate as migratePg } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import * as schema from './schema.js';
import { RemotePGlite } from './pglite-remote.js';

export type Schema = typeof schema;
export type Db = PgDatabase<PgQueryResultHKT, Schema>;
/** A transaction handle has the same query API as the database. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];
export type DbOrTx = Db | Tx;

export interface Database {
  db: Db;
  kind: 'pglite' | 'postgres';
  /** The embedded engine, when it is the one in use (tests dump and restore its data directory). */
  pglite?: PGlite | RemotePGlite;
  /** The embedded engine runs in a worker thread (PGLITE_WORKER). */
  worker?: boolean;
  ping(): Promise<void>;
  migrate(): Promise<void>;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  databaseUrl?: string;
  /** Folder of the embedded database; `memory://` keeps it in memory. */
  pgliteDataDir?: string;
  /** A `dumpDataDir` snapshot to start from (tests). */
  loadDataDir?: Blob | File;
  poolSize?: number;
  /**
   * Run the embedded engine in a worker thread: its statements (each synchronous in PGlite) then
   * never hold the request loop. Same API for the app; results cross the thread by structured clone.
   */
  pgliteWorker?: boolean;
}

/** Where the configuration puts the database: PostgreSQL when DATABASE_URL is set, else PGlite in DATA_DIR/pgdata. */
export function databaseOptionsFor(config: { databaseUrl?: string; dataDir: string; pgliteWorker?: boolean }): DatabaseOptions {
  return config.databaseUrl ? { databaseUrl: config.databaseUrl } : { pgliteDataDir: `${config.dataDir}/pgdata`, pgliteWorker: config.pgliteWorker };
}

const migrationsFolder = join(dirname(fileURLToPath(import.meta.url)), 'migrations');

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  if (options.databaseUrl) {
    const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 10 });
    const db = drizzlePg(pool, { schema }) as unknown as Db;
    return {
      db,
      kind: 'postgres',
      ping: async () => void (await pool.query('select 1')),
      // Several nodes may start together: one advisory lock makes them migrate one after another.
      migrate: async () => {
        const client = await pool.connect();
        try {
          await client.query('select pg_advisory_lock(724201)');
          await migratePg(drizzlePg(client, { schema }), { migrationsFolder });
        } finally {
          await client.query('select pg_advisory_unlock(724201)').catch(() => undefined);
          client.release();
        }
      },
      close: () => pool.end(),
    };
  }

  const dataDir = options.pgliteDataDir ?? 'memory://';
  const onDisk = !dataDir.startsWith('memory://');
  // PGlite does not create missing parent folders.
  if (onDisk) mkdirSync(dataDir, { recursive: true });
  const releaseLock = onDisk ? lockDataDir(dataDir) : () => undefined;
  let pglite: PGlite | RemotePGlite;
  try {
    pglite = options.pgliteWorker
      ? await RemotePGlite.create({ dataDir, loadDataDir: options.loadDataDir })
      : await createInThread(dataDir, options.loadDataDir);
  } catch (err) {
    releaseLock();
    throw err;
  }
  // drizzle's PGlite driver calls query/transaction only, which RemotePGlite implements
  const client = pglite as PGlite;
  const db = drizzlePglite(client, { schema }) as unknown as Db;
  return {
    db,
    kind: 'pglite',
    pglite,
    worker: options.pgliteWorker === true,
    ping: async () => void (await pglite.query('select 1')),
    migrate: () => migratePglite(drizzlePglite(client, { schema }), { migrationsFolder }),
    close: async () => {
      try {
        await pglite.close();
      } finally {
        releaseLock();
      }
    },
  };
}

/** PGlite on this thread; its module (the WASM engine) is loaded only when used. */
async function createInThread(dataDir: string, loadDataDir?: Blob | File): Promise<PGlite> {
  const [{ PGlite }, { pg_trgm }, { vector }] = await Promise.all([
    import('@electric-sql/pglite'),
    import('@electric-sql/pglite/contrib/pg_trgm'),
    import('@electric-sql/pglite-pgvector'),
  ]);
  return PGlite.create({ dataDir, loadDataDir, extensions: { vector, pg_trgm } });
}

/** Lock files this process holds: a lock naming our pid that is not in here is a leftover. */
const heldLocks = new Set<string>();

/**
 * The embedded database is one process's: a second process opening the same folder (say `cli
 * seed-demo` while the server runs) would not be seen by the first and could corrupt it. A lock file
 * names its owner by pid and process start time; a lock whose owner is gone (or whose pid now belongs
 * to another process, as after a container restart) is taken over.
 */
function lockDataDir(dataDir: string): () => void {
  const lockPath = `${realpathSync(dataDir)}.lock`;
  if (heldLocks.has(lockPath)) throw inUse(dataDir, process.pid, true);
  const me = `${process.pid} ${processStartTicks(process.pid) ?? ''}`.trim();
  for (let attempt = 0; attempt < 3; attempt++) {
    // Written aside, then linked into place: the lock never exists without its owner in it.
    const tmp = `${lockPath}.${process.pid}.${randomBytes(4).toString('hex')}`;
    writeFileSync(tmp, me);
    try {
      linkSync(tmp, lockPath);
      heldLocks.add(lockPath);
      let released = false;
      const release = () => {
        if (released) return;
        released = true;
        heldLocks.delete(lockPath);
        rmSync(lockPath, { force: true });
        process.off('exit', release);
      };
      process.on('exit', release);
      return release;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const [pidText, ticks] = readFileSync(lockPath, 'utf8').trim().split(' ');
      const owner = Number(pidText);
      if (ownerAlive(owner, ticks)) throw inUse(dataDir, owner, false);
      rmSync(lockPath, { force: true }); // a leftover: its owner is gone
    } finally {
      rmSync(tmp, { force: true });
    }
  }
  throw new Error(`Could not lock the embedded database in ${dataDir}`);
}

function inUse(dataDir: string, pid: number, self: boolean): Error {
  return new Error(
    `The embedded database in ${dataDir} is in use by process ${pid}${self ? ' (this one)' : ''}. ` +
      'Stop that process first, or use DATABASE_URL (PostgreSQL) to run several processes on one database.',
  );
}

function ownerAlive(pid: number, startTicks: string | undefined): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  // Our own pid but not a lock we hold: left by an earlier process that had the same pid.
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const now = processStartTicks(pid);
  return !startTicks || !now || now === startTicks;
}

/** Start time of a process in clock ticks since boot (Linux), to tell a reused pid from its old owner. */
function processStartTicks(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** Rows of a raw SQL query, whichever driver runs it (node-postgres and PGlite shape results differently). */
export async function rowsOf<T>(db: DbOrTx, query: ReturnType<typeof sql>): Promise<T[]> {
  const result = (await db.execute(query)) as unknown as { rows: T[] };
  return result.rows;
}
