import type { AppConfig } from '../../../config.js';
import type { Db, DbOrTx } from '../../../db/client.js';
import { JobAbortedError, type Job, type JobContext, type WorkerLogger } from '../../../platform/jobs.js';
import type { Embedder } from '../../../providers/embeddings/types.js';
import { BlobNotFoundError, type BlobStorage } from '../../../providers/storage/index.js';
import type { Clock } from '../../../shared/clock.js';
import { newId } from '../../../shared/ids.js';
import { activateUpload, findUploadById, lockUploadStatus, markIngestError, setIngestProgress } from '../uploads.repository.js';
import { deleteChunksOf, refreshPlannerStatistics, refreshUploadStatistics, writeIndexedChunks, writeUploadGraph, type ChunkToWrite } from '../../search/indexing.js';
import { readEmbedderState, recordEmbedderIfAbsent } from '../../search/search.repository.js';
import { packVector } from '../../search/vectors.js';
import { LocalEmbedder } from '../../../providers/embeddings/local.js';
import { ExtractionError, type ExtractLimits } from './formats.js';
import type { PreparedDocument, PrepareTask } from './prepare.js';
import { SandboxFailure } from './sandbox.js';
import { yieldToLoop } from '../../../shared/slices.js';

/**
 * Ingestion of one upload, run by a job worker: load the stored file → in a worker thread (sandbox.ts:
 * heap and time limits), extract its text, chunk it and, with the local embedder, embed the chunks →
 * with a remote embedder, embed here (network, in batches of EMBEDDINGS_BATCH_SIZE) → write every chunk
 * with its tsvector, and its vector into the staging table (search/vector-drain.ts moves it under the HNSW
 * index later), in multi-row inserts, in ONE transaction that also turns the upload 'active' (on PGlite,
 * large files excepted: see `staged` below). Until that commit the upload is 'processing'; a retry starts from
 * scratch.
 *
 * Failures end as status 'error' with a message the uploader can read: an ExtractionError's own
 * message (the parsers' bounds), the sandbox's (out of memory, timeout: never retried, the same file
 * would fail the same way), else a one-line summary of what failed. Transient failures (the embedding provider, the
 * database) are retried by the job queue first; the upload shows stage 'retrying' meanwhile.
 */

export const INGEST_QUEUE = 'vault.ingest';
export const INGEST_MAX_ATTEMPTS = 3;

export const EMBEDDER_CHANGED_MESSAGE = 'embedder changed: run `npm run cli -- reembed`';

/** Rows per INSERT statement: large enough to amortise the statement, small enough for the parameter limit. */
const INSERT_BATCH_ROWS = 200;
/**
 * On a single-connection database (PGlite), files with more chunks than this are written in staged
 * batches of STAGED_BATCH_ROWS: the engine runs one statement at a time for the whole app, and a batch
 * of 80 chunks holds it ~50–65 ms (its chunk rows ~0.55–0.7 ms a chunk, then its mentions ~0.1 ms a chunk;
 * with 1.2 ms a chunk before vectors were sent in binary form, this was 50 chunks for the same time).
 */
export const ATOMIC_MAX_ROWS = 200;
export const STAGED_BATCH_ROWS = 80;

// PGlite statements and the local embedder resolve through microtasks only: without an explicit turn of
// the event loop (yieldToLoop), a whole ingestion would run without letting a single HTTP request in.

export interface IngestDeps {
  db: Db;
  storage: BlobStorage;
  /** Read lazily: a misconfigured provider fails the job with its own message, not the app. */
  embedder: () => Embedder;
  config: Pick<AppConfig, 'embeddings'>;
  /** The CPU work (extract, chunk, local embeddings), off the request loop: IngestSandbox.run. */
  prepare: (task: PrepareTask, signal?: AbortSignal) => Promise<PreparedDocument>;
  limits: ExtractLimits;
  clock: Clock;
  log: WorkerLogger;
  /** The database runs one statement at a time for the whole app (PGlite): keep transactions short. */
  singleConnection?: boolean;
  /** Asks the background move of staged vectors into the HNSW index to wait while this writes (search/vector-drain.ts). */
  holdVectorDrain?: () => () => void;
  /**
   * The embedded engine, which runs one statement at a time for the whole app: a large file's writes ahead
   * of its activation (and their progress) go through this handle, not counted as the app's activity, and
   * each first waits for the requests using the engine (db/activity.ts waitForQuiet).
   */
  background?: { db: Db; giveWay: () => Promise<void> };
  /** Called once a file is active (the server's IndexWarmer, search/indexing.ts, reads its index into memory in the background). */
  afterActivation?: (uploadId: string) => void;
}

export interface IngestOptions {
  signal?: AbortSignal;
  /** When false, a transient failure is thrown for the queue to retry instead of ending the upload. */
  lastAttempt?: boolean;
}

export type IngestOutcome =
  | { status: 'active'; chunkCount: number; textTokens: number; pages: number | null; timings: Record<string, number> }
  | { status: 'error'; message: string }
  | { status: 'skipped'; reason: string };

/** An error whose message is already fit for the uploader; never retried. */
class IngestFailure extends Error {
  override name = 'IngestFailure';
}

const STAGE_LABEL: Record<string, string> = {
  loading: 'Reading the stored file',
  extracting: 'Text extraction',
  chunking: 'Chunking',
  embedding: 'Embedding',
  indexing: 'Indexing',
};

const oneLine = (s: string, max = 300) => {
  const line = s.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
};

/**
 * Whether the stored vectors were made by this embedder (recording it when nothing is recorded yet).
 * `lock` (inside a transaction) locks the state row until the transaction ends: 'share' keeps a
 * re-embed from changing it meanwhile without serialising the writers of vectors among themselves.
 */
export async function embedderMatches(db: DbOrTx, embedder: Embedder, now: Date, options: { lock?: 'share' | 'update' } = {}): Promise<boolean> {
  const state =
    (await readEmbedderState(db, options)) ?? (await recordEmbedderIfAbsent(db, { id: embedder.id, dimensions: embedder.dimensions, complete: true }, now));
  return state.id === embedder.id && state.dimensions === embedder.dimensions;
}

export async function ingestUpload(deps: IngestDeps, uploadId: string, options: IngestOptions = {}): Promise<IngestOutcome> {
  const { db, clock, log } = deps;
  const lastAttempt = options.lastAttempt ?? true;
  const upload = await findUploadById(db, uploadId);
  if (!upload) {
    // deleted meanwhile: graph rows an earlier attempt wrote after the deletion (they have no foreign key:
    // schema.ts kgEntities) go too
    await deleteChunksOf(db, uploadId);
    return { status: 'skipped', reason: 'upload not found' };
  }
  if (upload.status !== 'processing') return { status: 'skipped', reason: `upload is ${upload.status}` };

  const timings: Record<string, number> = {};
  let stage = 'loading';
  let t = performance.now();
  const lap = (name: string) => {
    const now = performance.now();
    timings[name] = Math.round(now - t);
    t = now;
  };
  const progress = async (next: string, pct: number, on: Db = db) => {
    stage = next;
    if (!(await setIngestProgress(on, uploadId, next, Math.round(pct), clock.now()))) throw new SkipIngest(`upload left processing during ${next}`);
  };
  let stagedWrites = false;
  let releaseDrain: (() => void) | undefined;
  const checkAbort = () => {
    if (options.signal?.aborted) throw new JobAbortedError('ingestion stopped');
  };

  try {
    let embedder: Embedder;
    try {
      embedder = deps.embedder();
    } catch (err) {
      throw new IngestFailure(`Embedding provider is not available: ${oneLine((err as Error).message)}`);
    }
    if (!(await embedderMatches(db, embedder, clock.now()))) throw new IngestFailure(EMBEDDER_CHANGED_MESSAGE);

    await progress('loading', 2);
    let buffer: Buffer;
    try {
      buffer = await deps.storage.getBuffer(upload.storageKey);
    } catch (err) {
      if (err instanceof BlobNotFoundError) throw new IngestFailure('The stored file is missing; upload it again');
      throw err;
    }
    lap('load');

    await progress('extracting', 5);
    // extraction, chunking and (local model) embedding run in a worker thread with heap and time limits
    const doc = await deps.prepare(
      { bytes: buffer, mimetype: upload.mimetype, originalname: upload.originalname, limits: deps.limits, localEmbed: embedder instanceof LocalEmbedder ? { dimensions: embedder.dimensions, version: embedder.version } : undefined },
      options.signal,
    );
    timings.extract = doc.timings.extract;
    timings.chunk = doc.timings.chunk;
    timings.entities = doc.timings.entities;
    lap('prepare');
    checkAbort();
    const pieces = doc.chunks;
    if (pieces.length === 0) throw new IngestFailure('File contains no text');

    const rows: ChunkToWrite[] = [];
    if (doc.vectors) {
      if (doc.embedderId !== embedder.id) throw new Error(`worker embedded with ${doc.embedderId}, expected ${embedder.id}`);
      const dims = embedder.dimensions;
      const vectors = doc.vectors;
      // packed vectors in slices, with a turn of the event loop between them
      for (let i = 0; i < pieces.length; i++) {
        const c = pieces[i]!;
        rows.push({ id: newId(), index: c.index, text: c.text, heading: c.heading, tokens: c.tokens, mentions: c.mentions, embedding: packVector(vectors.subarray(i * dims, (i + 1) * dims), dims) });
        if (i % 256 === 255) await yieldToLoop();
      }
      timings.embedInWorker = doc.timings.embed ?? 0;
    } else {
      await progress('embedding', 20);
      const batchSize = Math.max(1, deps.config.embeddings.batchSize);
      let lastWrite = performance.now();
      for (let i = 0; i < pieces.length; i += batchSize) {
        checkAbort();
        const batch = pieces.slice(i, i + batchSize);
        const vectors = await embedder.embed(
          batch.map((c) => c.text),
          { signal: options.signal },
        );
        if (vectors.length !== batch.length) throw new Error(`embedder returned ${vectors.length} vectors for ${batch.length} texts`);
        batch.forEach((c, j) => {
          rows.push({ id: newId(), index: c.index, text: c.text, heading: c.heading, tokens: c.tokens, mentions: c.mentions, embedding: packVector(vectors[j]!, embedder.dimensions) });
        });
        await yieldToLoop();
        // progress at most every 250 ms: each write is a statement the API waits behind on PGlite
        if (performance.now() - lastWrite > 250 && i + batchSize < pieces.length) {
          await progress('embedding', 20 + (70 * rows.length) / pieces.length);
          lastWrite = performance.now();
        }
      }
    }
    lap('embed');
    checkAbort();

    await progress('indexing', 90);
    releaseDrain = deps.holdVectorDrain?.();
    const textTokens = rows.reduce((n, r) => n + r.tokens, 0);
    const pages = doc.pages ?? null;
    // On a single-connection database (PGlite) a transaction holds every other query of the app: one of
    // thousands of rows (~2 ms each) would stall the API for seconds.
    // There, a large file's chunks are written ahead in short autocommitted batches while the upload is
    // still 'processing' (readers only use chunks of active files), and the last batch commits with
    // the activation; on any failure the staged rows are removed again.
    const staged = deps.singleConnection === true && rows.length > ATOMIC_MAX_ROWS;
    let tail = rows;
    if (staged) {
      stagedWrites = true;
      // each statement ahead waits for the requests using the engine first (the statement in flight when a
      // request arrives still finishes first: STAGED_BATCH_ROWS bounds it)
      const ahead = deps.background?.db ?? db;
      const giveWay = async () => {
        checkAbort();
        await yieldToLoop();
        await deps.background?.giveWay();
        checkAbort();
      };
      await deleteChunksOf(ahead, uploadId);
      const cut = rows.length - STAGED_BATCH_ROWS;
      for (let i = 0; i < cut; i += STAGED_BATCH_ROWS) {
        await giveWay();
        const end = Math.min(cut, i + STAGED_BATCH_ROWS);
        await writeIndexedChunks(ahead, uploadId, rows.slice(i, end), clock.now());
        await progress('indexing', 90 + (9 * end) / rows.length, ahead);
      }
      // the file's entities and edges (computed in the sandbox), also ahead and in short statements
      await giveWay();
      await writeUploadGraph(ahead, uploadId, doc.graph, giveWay);
      tail = rows.slice(cut);
    }
    const activated = await db.transaction(async (tx) => {
      const status = await lockUploadStatus(tx, uploadId);
      if (status !== 'processing') {
        if (staged) await deleteChunksOf(tx, uploadId);
        return false;
      }
      // the model check again, under a share lock of the state row: a re-embed or another node's model
      // cannot slip in between the check and these rows (other ingestions and chunk edits do not wait)
      const state = await readEmbedderState(tx, { lock: 'share' });
      if (state && (state.id !== embedder.id || state.dimensions !== embedder.dimensions)) throw new IngestFailure(EMBEDDER_CHANGED_MESSAGE);
      if (!staged) await deleteChunksOf(tx, uploadId); // leftovers of an attempt that died mid-way
      for (let i = 0; i < tail.length; i += INSERT_BATCH_ROWS) await writeIndexedChunks(tx, uploadId, tail.slice(i, i + INSERT_BATCH_ROWS), clock.now());
      if (!staged) await writeUploadGraph(tx, uploadId, doc.graph); // the knowledge graph of the upload
      await refreshUploadStatistics(tx, uploadId); // its search statistics, with a new version
      await activateUpload(tx, uploadId, { chunkCount: rows.length, textTokens, pages, embeddingModel: embedder.id }, clock.now());
      return true;
    });
    releaseDrain?.();
    if (!activated) return { status: 'skipped', reason: 'upload left processing before indexing' };
    // The file is active from here: a failure of what follows must not take its chunks (the catch below)
    // or fail the job; planner statistics are only a help to the next queries.
    await refreshPlannerStatistics(db, rows.length, deps.singleConnection ? 'pglite' : 'postgres').catch((err: unknown) =>
      log.warn({ err, uploadId }, 'refreshing planner statistics after an ingestion failed'),
    );
    lap('index');
    deps.afterActivation?.(uploadId);
    log.info({ uploadId, chunks: rows.length, textTokens, pages, timings }, 'upload ingested');
    return { status: 'active', chunkCount: rows.length, textTokens, pages, timings };
  } catch (err) {
    releaseDrain?.();
    if (stagedWrites) await deleteChunksOf(db, uploadId).catch((e: unknown) => log.error({ err: e, uploadId }, 'could not remove staged chunks'));
    if (err instanceof SkipIngest) return { status: 'skipped', reason: err.message };
    if (err instanceof JobAbortedError || options.signal?.aborted) {
      await setIngestProgress(db, uploadId, 'queued', 0, clock.now()).catch(() => false);
      throw err instanceof JobAbortedError ? err : new JobAbortedError('ingestion stopped');
    }
    if (err instanceof ExtractionError || err instanceof IngestFailure || err instanceof SandboxFailure) {
      await markIngestError(db, uploadId, err.message, clock.now());
      log.info({ uploadId, stage, reason: err.message }, 'upload rejected by ingestion');
      return { status: 'error', message: err.message };
    }
    const summary = `${STAGE_LABEL[stage] ?? 'Ingestion'} failed: ${oneLine(err instanceof Error ? err.message : String(err))}`;
    if (!lastAttempt) {
      await setIngestProgress(db, uploadId, 'retrying', 0, clock.now()).catch(() => false);
      throw err; // the queue retries with backoff
    }
    log.error({ err, uploadId, stage }, 'ingestion failed');
    await markIngestError(db, uploadId, summary, clock.now()).catch(() => false);
    return { status: 'error', message: summary };
  }
}

class SkipIngest extends Error {
  override name = 'SkipIngest';
}

/** The job handler of the ingestion queue. */
export function ingestJobHandler(deps: IngestDeps) {
  return async (payload: Record<string, unknown>, context: JobContext): Promise<void> => {
    const uploadId = typeof payload.uploadId === 'string' ? payload.uploadId : '';
    if (!uploadId) throw new Error('ingest job without uploadId');
    await ingestUpload(deps, uploadId, { signal: context.signal, lastAttempt: context.lastAttempt });
  };
}

/**
 * Why a job ended outside the pipeline, for the uploader. A job whose process died while running it
 * (the queue's sweep says "worker lost") counted an attempt each time: after INGEST_MAX_ATTEMPTS
 * deaths the file is given up, so a file that kills the server cannot kill every restart.
 */
function giveUpMessage(job: Job, error: string): string {
  if (/worker lost/.test(error)) {
    return `The server stopped while ingesting this file, ${job.attempts} ${job.attempts === 1 ? 'time' : 'times'}; it is not retried again and was not indexed`;
  }
  return `Ingestion failed: ${oneLine(error)}`;
}

/**
 * A job that failed for good outside the pipeline (e.g. its workers kept dying) ends its upload too,
 * and removes the chunks a dead worker may have staged (they would never be activated nor cleaned up).
 */
export function ingestGiveUp(deps: Pick<IngestDeps, 'db' | 'clock'>) {
  return async (job: Job, error: string): Promise<void> => {
    const uploadId = typeof job.payload.uploadId === 'string' ? job.payload.uploadId : '';
    if (!uploadId) return;
    await deps.db.transaction(async (tx) => {
      const status = await lockUploadStatus(tx, uploadId);
      if (status === 'processing') await markIngestError(tx, uploadId, giveUpMessage(job, error), deps.clock.now());
      else if (status !== 'error' && status !== undefined) return; // undefined: the upload is gone, its graph rows go too
      await deleteChunksOf(tx, uploadId);
    });
  };
}
