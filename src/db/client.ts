import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { vector } from '@electric-sql/pglite-pgvector';
import { sql } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { migrate as migratePg } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import * as schema from './schema.js';

export type Schema = typeof schema;
export type Db = PgDatabase<PgQueryResultHKT, Schema>;
/** A transaction handle has the same query API as the database. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];
export type DbOrTx = Db | Tx;

export interface Database {
  db: Db;
  kind: 'pglite' | 'postgres';
  /** The embedded engine, when it is the one in use (tests dump and restore its data directory). */
  pglite?: PGlite;
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
  let pglite: PGlite;
  try {
    pglite = await PGlite.create({ dataDir, loadDataDir: options.loadDataDir, extensions: { vector, pg_trgm } });
  } catch (err) {
    releaseLock();
    throw err;
  }
  const db = drizzlePglite(pglite, { schema }) as unknown as Db;
  return {
    db,
    kind: 'pglite',
    pglite,
    ping: async () => void (await pglite.query('select 1')),
    migrate: () => migratePglite(drizzlePglite(pglite, { schema }), { migrationsFolder }),
    close: async () => {
      try {
        await pglite.close();
      } finally {
        releaseLock();
      }
    },
  };
}

/**
 * The embedded database is one process's: a second process opening the same folder (say `cli
 * seed-demo` while the server runs) would not be seen by the first and could corrupt it. A lock file
 * with the owner's pid refuses that with a clear message; a lock left by a dead process is taken over.
 */
function lockDataDir(dataDir: string): () => void {
  const lockPath = `${dataDir.replace(/\/+$/, '')}.lock`;
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(lockPath, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      let released = false;
      const release = () => {
        if (released) return;
        released = true;
        rmSync(lockPath, { force: true });
        process.off('exit', release);
      };
      process.on('exit', release);
      return release;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = Number(readFileSync(lockPath, 'utf8').trim());
      if (Number.isInteger(owner) && owner > 0 && isAlive(owner)) {
        throw new Error(
          `The embedded database in ${dataDir} is in use by process ${owner}${owner === process.pid ? ' (this one)' : ''}. ` +
            'Stop that process first, or use DATABASE_URL (PostgreSQL) to run several processes on one database.',
        );
      }
      rmSync(lockPath, { force: true }); // stale: its owner is gone
    }
  }
  throw new Error(`Could not lock the embedded database in ${dataDir}`);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Rows of a raw SQL query, whichever driver runs it (node-postgres and PGlite shape results differently). */
export async function rowsOf<T>(db: DbOrTx, query: ReturnType<typeof sql>): Promise<T[]> {
  const result = (await db.execute(query)) as unknown as { rows: T[] };
  return result.rows;
}
