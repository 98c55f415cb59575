import { Worker } from 'node:worker_threads';
import type { QueryOptions, Results, RowMode } from '@electric-sql/pglite';
import { siblingModule } from '../shared/sibling-module.js';

/** Start data of the worker (pglite-worker.ts). */
export interface WorkerStart {
  dataDir: string;
  loadDataDir?: Blob | File;
}

export type WorkerRequest =
  | { id: number; op: 'query'; sql: string; params?: unknown[]; rowMode?: RowMode; rawTypes?: number[]; paramTypes?: number[]; txId?: number }
  | { id: number; op: 'exec'; sql: string; txId?: number }
  | { id: number; op: 'begin'; txId: number }
  | { id: number; op: 'end'; txId: number; commit: boolean }
  | { id: number; op: 'dump'; compression?: 'auto' | 'gzip' | 'none' }
  | { id: number; op: 'close' };

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
type Request = DistributiveOmit<WorkerRequest, 'id'>;

export type WorkerReply =
  | { id: number; ok: true; result: unknown }
  | { id: number; ok: false; error: { name: string; message: string; stack?: string; fields: Record<string, unknown> } };

type QueryTarget = Pick<RemotePGliteTransaction, 'query' | 'exec'>;

/** What drizzle's PGlite driver calls on a transaction. */
export interface RemotePGliteTransaction {
  query<T>(sql: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>>;
  exec(sql: string): Promise<Results[]>;
  rollback(): Promise<void>;
  readonly closed: boolean;
}

/**
 * PGlite in a worker thread, with the part of PGlite's API the app uses (what drizzle's PGlite driver
 * calls: `query`, `exec`, `transaction`; plus `dumpDataDir` and `close`). Results cross the thread
 * boundary by structured clone; parsers, which are functions, cannot: the worker returns the raw text
 * of the types a caller asked to parse itself and the caller's parsers run here.
 */
export class RemotePGlite {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private nextTx = 1;
  private exited: Error | undefined;
  readonly ready: Promise<void>;

  private constructor(start: WorkerStart) {
    const { url, fromSource } = siblingModule(import.meta.url, 'pglite-worker');
    this.worker = fromSource
      ? new Worker(
          `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then((tsx) => { tsx.register(); return import(${JSON.stringify(url.href)}); })`,
          { eval: true, workerData: start },
        )
      : new Worker(url, { workerData: start });
    let markReady!: () => void;
    let failReady!: (e: Error) => void;
    this.ready = new Promise<void>((resolve, reject) => {
      markReady = resolve;
      failReady = reject;
    });
    this.pending.set(0, { resolve: () => markReady(), reject: (e) => failReady(e) });
    this.worker.on('message', (reply: WorkerReply) => {
      const waiter = this.pending.get(reply.id);
      if (!waiter) return;
      this.pending.delete(reply.id);
      if (reply.ok) waiter.resolve(reply.result);
      else waiter.reject(rebuildError(reply.error));
    });
    const fail = (err: Error) => {
      this.exited = err;
      for (const waiter of this.pending.values()) waiter.reject(err);
      this.pending.clear();
    };
    this.worker.on('error', (err) => fail(err));
    this.worker.on('exit', (code) => fail(new Error(`The database worker exited (code ${code})`)));
  }

  static async create(start: WorkerStart): Promise<RemotePGlite> {
    const db = new RemotePGlite(start);
    try {
      await db.ready;
    } catch (err) {
      await db.worker.terminate();
      throw err;
    }
    return db;
  }

  private call<T>(request: Request): Promise<T> {
    if (this.exited) return Promise.reject(this.exited);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ ...request, id });
    });
  }

  async query<T>(sql: string, params?: unknown[], options?: QueryOptions, txId?: number): Promise<Results<T>> {
    const parsers = options?.parsers;
    const rawTypes = parsers ? Object.keys(parsers).map(Number) : undefined;
    const result = await this.call<Results<T>>({ op: 'query', sql, params, rowMode: options?.rowMode, rawTypes, paramTypes: options?.paramTypes, txId });
    if (parsers && rawTypes!.length > 0) applyParsers(result, parsers, options?.rowMode ?? 'object');
    return result;
  }

  exec(sql: string, txId?: number): Promise<Results[]> {
    return this.call<Results[]>({ op: 'exec', sql, txId });
  }

  async transaction<T>(callback: (tx: RemotePGliteTransaction) => Promise<T>): Promise<T> {
    const txId = this.nextTx++;
    await this.call({ op: 'begin', txId });
    let closed = false;
    const target: QueryTarget = {
      query: <R>(sql: string, params?: unknown[], options?: QueryOptions) => this.query<R>(sql, params, options, txId),
      exec: (sql: string) => this.exec(sql, txId),
    };
    const tx: RemotePGliteTransaction = {
      query: (sql, params, options) => (closed ? Promise.reject(new Error('Transaction is closed')) : target.query(sql, params, options)),
      exec: (sql) => (closed ? Promise.reject(new Error('Transaction is closed')) : target.exec(sql)),
      rollback: async () => {
        throw new Error('rollback() is not supported here: throw from the transaction callback instead');
      },
      get closed() {
        return closed;
      },
    };
    let result: T;
    try {
      result = await callback(tx);
    } catch (err) {
      closed = true;
      await this.call({ op: 'end', txId, commit: false }).catch(() => undefined);
      throw err;
    }
    closed = true;
    await this.call({ op: 'end', txId, commit: true });
    return result;
  }

  dumpDataDir(compression?: 'auto' | 'gzip' | 'none'): Promise<File | Blob> {
    return this.call<File | Blob>({ op: 'dump', compression });
  }

  async close(): Promise<void> {
    if (this.exited) return;
    try {
      await this.call({ op: 'close' });
    } finally {
      await this.worker.terminate();
    }
  }
}

function applyParsers(result: Results<unknown>, parsers: NonNullable<QueryOptions['parsers']>, rowMode: RowMode): void {
  const columns = result.fields
    .map((f, index) => ({ index, name: f.name, parse: parsers[f.dataTypeID] }))
    .filter((c): c is { index: number; name: string; parse: NonNullable<typeof c.parse> } => c.parse !== undefined);
  if (columns.length === 0) return;
  for (const row of result.rows as unknown[]) {
    for (const c of columns) {
      if (rowMode === 'array') {
        const r = row as unknown[];
        if (r[c.index] !== null) r[c.index] = c.parse(r[c.index] as string);
      } else {
        const r = row as Record<string, unknown>;
        if (r[c.name] !== null) r[c.name] = c.parse(r[c.name] as string);
      }
    }
  }
}

/** The database error as PGlite raised it in the worker: same message, code, constraint, detail... */
function rebuildError(e: { name: string; message: string; stack?: string; fields: Record<string, unknown> }): Error {
  const err = Object.assign(new Error(e.message), e.fields);
  err.name = e.name;
  if (e.stack) err.stack = `${e.stack}\n    at (database worker thread)`;
  return err;
}
