/**
 * The embedded database in its own thread (started by pglite-remote.ts). PGlite runs each statement
 * synchronously on the thread that owns it; here that thread is this one, so a long statement (an
 * HNSW insert batch, a big scan) no longer stops the request loop. The protocol is small: query,
 * exec, begin/end of a transaction (held open here while the main thread sends its statements),
 * dump, close. PGlite's own locks give the same ordering as in-thread: a statement outside an open
 * transaction waits for it to end.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite, type Transaction } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { vector } from '@electric-sql/pglite-pgvector';
import { sendBytesAsBinary } from './binary-params.js';
import { RawTypes } from './raw-types.js';
import type { WorkerReply, WorkerRequest, WorkerStart } from './pglite-remote.js';

const port = parentPort!;
const start = workerData as WorkerStart;

let rawTypes!: RawTypes;
const ready: Promise<PGlite> = PGlite.create({ dataDir: start.dataDir, loadDataDir: start.loadDataDir, extensions: { vector, pg_trgm } }).then((pg) => {
  sendBytesAsBinary(pg);
  // drizzle's raw types are read raw by the instance: its statements pass no parsers (raw-types.ts)
  rawTypes = new RawTypes(pg);
  return pg;
});
const transactions = new Map<number, Transaction>();
const enders = new Map<number, { commit: () => void; rollback: () => void; done: Promise<void> }>();

class Rollback extends Error {}

function reply(message: WorkerReply): void {
  port.postMessage(message);
}

function errorReply(id: number, err: unknown): void {
  const e = (err ?? {}) as Record<string, unknown>;
  const fields: Record<string, unknown> = {};
  for (const key of ['code', 'detail', 'hint', 'constraint', 'table', 'column', 'schema', 'severity', 'position', 'where', 'routine', 'dataType']) {
    if (e[key] !== undefined) fields[key] = e[key];
  }
  reply({ id, ok: false, error: { name: String(e.name ?? 'Error'), message: String(e.message ?? err), stack: typeof e.stack === 'string' ? e.stack : undefined, fields } });
}

async function handle(db: PGlite, req: WorkerRequest): Promise<void> {
  switch (req.op) {
    case 'query': {
      const target = req.txId === undefined ? db : transactions.get(req.txId);
      if (!target) throw new Error('The transaction has ended');
      const parsers = rawTypes.parsersFor(req.rawTypes);
      const result = await target.query(req.sql, req.params, { rowMode: req.rowMode, parsers, paramTypes: req.paramTypes });
      reply({ id: req.id, ok: true, result: { rows: result.rows, fields: result.fields, affectedRows: result.affectedRows } });
      return;
    }
    case 'exec': {
      const target = req.txId === undefined ? db : transactions.get(req.txId);
      if (!target) throw new Error('The transaction has ended');
      const results = await target.exec(req.sql, { parsers: rawTypes.parsersFor(undefined) });
      reply({ id: req.id, ok: true, result: results.map((r) => ({ rows: r.rows, fields: r.fields, affectedRows: r.affectedRows })) });
      return;
    }
    case 'begin': {
      let isOpen = false;
      let opened!: () => void;
      const openedSignal = new Promise<void>((resolve) => (opened = resolve));
      let commit!: () => void;
      let rollback!: () => void;
      const done = db
        .transaction(async (tx) => {
          transactions.set(req.txId, tx);
          isOpen = true;
          opened();
          await new Promise<void>((resolve, reject) => {
            commit = resolve;
            rollback = () => reject(new Rollback());
          });
        })
        .finally(() => transactions.delete(req.txId));
      const outcome = done.then(
        () => undefined,
        (err: unknown) => (err instanceof Rollback ? undefined : Promise.reject(err)),
      );
      outcome.catch(() => undefined); // observed by 'end', or below when BEGIN itself failed
      const failure = await Promise.race([openedSignal.then(() => undefined), outcome.then(() => new Error('The transaction ended before it began'), (err: unknown) => err)]);
      if (!isOpen) {
        errorReply(req.id, failure);
        return;
      }
      enders.set(req.txId, { commit: () => commit(), rollback: () => rollback(), done: outcome });
      reply({ id: req.id, ok: true, result: null });
      return;
    }
    case 'end': {
      const ender = enders.get(req.txId);
      if (!ender) throw new Error('No such transaction');
      enders.delete(req.txId);
      if (req.commit) ender.commit();
      else ender.rollback();
      await ender.done; // a failed COMMIT (a deferred constraint) rejects here
      reply({ id: req.id, ok: true, result: null });
      return;
    }
    case 'dump': {
      const blob = await db.dumpDataDir(req.compression);
      reply({ id: req.id, ok: true, result: blob });
      return;
    }
    case 'close': {
      await db.close();
      reply({ id: req.id, ok: true, result: null });
      return;
    }
  }
}

port.on('message', (req: WorkerRequest) => {
  ready.then(
    (db) => handle(db, req).catch((err: unknown) => errorReply(req.id, err)),
    (err: unknown) => errorReply(req.id, err),
  );
});

ready.then(
  () => reply({ id: 0, ok: true, result: 'ready' }),
  (err: unknown) => errorReply(0, err),
);
