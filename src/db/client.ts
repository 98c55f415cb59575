import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import type { drizzle as DrizzlePg } from 'drizzle-orm/node-postgres';
import type pg from 'pg';
import { BACKGROUND_GIVE_WAY, EngineActivity, TrackedPGlite, waitForQuiet } from './activity.js';
import * as schema from './schema.js';
import { RemotePGlite } from './pglite-remote.js';
import { lockDataDir } from './lock.js';
import { sendBytesAsBinary } from './binary-params.js';
import type { EarlyPglite } from './early.js';

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
  /**
   * The embedded engine only (it runs one statement at a time for the whole app): a handle for background
   * jobs whose statements are not counted as the app's activity, and that activity (statements of `db`
   * in flight, and when the last one ended), which those jobs give way to. PostgreSQL runs statements side
   * by side: nothing to give way to. `giveWay`: waits as BACKGROUND_GIVE_WAY says (db/activity.ts).
   */
  background?: { db: Db; activity: EngineActivity; giveWay: () => Promise<void> };
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
  /** The embedded database's worker, already starting (server start-up: see early.ts). */
  early?: EarlyPglite;
  /** PostgreSQL: a connection of the pool failed while idle or inside a transaction (e.g. the server dropped it); the pool replaces it. */
  onConnectionError?: (err: Error) => void;
}

/** Where the configuration puts the database: PostgreSQL when DATABASE_URL is set, else PGlite in DATA_DIR/pgdata. */
export function databaseOptionsFor(config: { databaseUrl?: string; dataDir: string; pgliteWorker?: boolean }): DatabaseOptions {
  return config.databaseUrl ? { databaseUrl: config.databaseUrl } : { pgliteDataDir: `${config.dataDir}/pgdata`, pgliteWorker: config.pgliteWorker };
}

/**
 * drizzle-orm's node-postgres `transaction()` checks a client out of the pool and sends `begin` before
 * its try/finally: when `begin` fails (the connection dropped as the transaction started) the client is
 * never released, and `pool.end()` then waits for it for ever (graceful shutdown hangs). Here the
 * transaction checks the client out itself and always gives it back; the pool discards it when its
 * connection is dead. One drizzle handle per pooled client, made the first time that client is used.
 */
function releaseClientWhenBeginFails(db: Db, pool: pg.Pool, drizzlePg: typeof DrizzlePg, options: DatabaseOptions): void {
  const handles = new WeakMap<pg.PoolClient, Db>();
  const transaction: Db['transaction'] = async (run, config) => {
    const client = await pool.connect();
    // A checked-out client has no 'error' listener of the pool's: a connection that drops mid-transaction
    // emits 'error' on the client (besides failing the query), which would otherwise end the process.
    const onError = (err: Error) => options.onConnectionError?.(err);
    client.on('error', onError);
    try {
      let handle = handles.get(client);
      if (!handle) handles.set(client, (handle = drizzlePg(client, { schema }) as unknown as Db));
      return await handle.transaction(run, config);
    } finally {
      // the pool discards a client whose connection is dead (not queryable) instead of keeping it idle
      client.off('error', onError);
      client.release();
    }
  };
  Object.defineProperty(db, 'transaction', { value: transaction, writable: true, configurable: true });
}

const migrationsFolder = join(dirname(fileURLToPath(import.meta.url)), 'migrations');

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  if (options.databaseUrl) {
    // PostgreSQL's driver is loaded only when it is used (start-up time of the embedded default)
    const [{ default: pgModule }, { drizzle: drizzlePg }, { migrate: migratePg }] = await Promise.all([
      import('pg'),
      import('drizzle-orm/node-postgres'),
      import('drizzle-orm/node-postgres/migrator'),
    ]);
    const pool = new pgModule.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 10 });
    // An idle connection that the server (or the network) drops is an 'error' event of the pool; with no
    // listener it would be thrown and end the process. The pool discards that client and opens a new
    // one for the next query; a query in flight fails on its own and its request gets a 500.
    pool.on('error', (err) => options.onConnectionError?.(err));
    const db = drizzlePg(pool, { schema }) as unknown as Db;
    releaseClientWhenBeginFails(db, pool, drizzlePg, options);
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
  const early = options.early?.dataDir === dataDir ? options.early : undefined;
  // PGlite does not create missing parent folders.
  if (onDisk && !early) mkdirSync(dataDir, { recursive: true });
  const releaseLock = early ? early.releaseLock : onDisk ? lockDataDir(dataDir) : () => undefined;
  let pglite: PGlite | RemotePGlite;
  try {
    pglite = early
      ? await early.pglite
      : options.pgliteWorker
        ? await RemotePGlite.create({ dataDir, loadDataDir: options.loadDataDir })
        : await createInThread(dataDir, options.loadDataDir);
  } catch (err) {
    releaseLock();
    throw err;
  }
  // drizzle's PGlite driver calls query/transaction only, which RemotePGlite and TrackedPGlite implement
  const client = pglite as PGlite;
  const activity = new EngineActivity();
  const db = drizzlePglite(new TrackedPGlite(client, activity) as unknown as PGlite, { schema }) as unknown as Db;
  // the same engine, its statements not counted as the app's activity (background jobs, migrations)
  const untracked = drizzlePglite(client, { schema });
  return {
    db,
    kind: 'pglite',
    pglite,
    worker: options.pgliteWorker === true,
    background: { db: untracked as unknown as Db, activity, giveWay: () => waitForQuiet(activity, BACKGROUND_GIVE_WAY) },
    ping: async () => void (await pglite.query('select 1')),
    migrate: () => migratePglite(untracked, { migrationsFolder }),
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
  const pg = await PGlite.create({ dataDir, loadDataDir, extensions: { vector, pg_trgm } });
  sendBytesAsBinary(pg);
  return pg;
}

/** Rows of a raw SQL query, whichever driver runs it (node-postgres and PGlite shape results differently). */
export async function rowsOf<T>(db: DbOrTx, query: ReturnType<typeof sql>): Promise<T[]> {
  const result = (await db.execute(query)) as unknown as { rows: T[] };
  return result.rows;
}
