import type { AppConfig } from '../../../config.js';
import type { Db } from '../../../db/client.js';
import { retryOnLockConflict } from '../../../db/errors.js';
import type { Embedder } from '../../../providers/embeddings/types.js';
import { systemClock, type Clock } from '../../../shared/clock.js';
import {
  chunkTextsAfter,
  countChunks,
  createEmbeddingIndex,
  dropEmbeddingIndex,
  embeddingColumnDimensions,
  lockEmbedderChanges,
  readEmbedderState,
  resizeEmbeddingColumn,
  setEmbeddingModelOfIndexedUploads,
  updateChunkEmbeddings,
  writeEmbedderState,
  type EmbedderState,
} from '../../search/search.repository.js';
import { EMBEDDER_CHANGED_MESSAGE } from './pipeline.js';
import { packVector } from '../../search/vectors.js';

/** What re-embedding needs; an AppContext has it, and so does the CLI without an HTTP app. */
export interface ReembedContext {
  db: Db;
  config: Pick<AppConfig, 'embeddings'>;
  providers: { embedder: Embedder };
  clock?: Clock;
  log?: { info(obj: object, msg?: string): void; error(obj: object, msg?: string): void };
}

export interface ReembedResult {
  embedder: string;
  dimensions: number;
  previous: EmbedderState | null;
  chunks: number;
  /** the column's dimension was changed */
  resized: boolean;
  ms: number;
}

/**
 * Re-embeds every chunk with the current embedder, so that stored vectors never mix two models.
 *
 * 1. The new embedder is recorded at once with `complete: false`: from then on, nodes still running
 *    the old model refuse to ingest (their final check fails), and nodes with the new one may.
 * 2. The HNSW index is dropped (bulk updates into it are slow) and, when the dimension changed, every
 *    vector (indexed or staged) is removed and both vector columns altered to `vector(n)`.
 * 3. Chunks are read in id order, embedded in batches of EMBEDDINGS_BATCH_SIZE, written to chunk_vectors
 *    (replacing a vector still staged by ingestion) one statement per batch; the index is rebuilt; the
 *    state becomes `complete: true`.
 * Running it again after an interruption is safe: it simply starts over.
 */
export async function reembedAll(ctx: ReembedContext, options: { onProgress?: (done: number, total: number) => void } = {}): Promise<ReembedResult> {
  const started = performance.now();
  const clock = ctx.clock ?? systemClock;
  const { db } = ctx;
  const embedder = ctx.providers.embedder;
  const previous = (await readEmbedderState(db)) ?? null;
  const total = await countChunks(db);
  const columnDims = await embeddingColumnDimensions(db);
  const resized = columnDims !== embedder.dimensions;

  await writeEmbedderState(db, { id: embedder.id, dimensions: embedder.dimensions, complete: false }, clock.now());
  await retryOnLockConflict(
    () =>
      db.transaction(async (tx) => {
        await lockEmbedderChanges(tx);
        await dropEmbeddingIndex(tx);
        if (resized) await resizeEmbeddingColumn(tx, embedder.dimensions);
      }),
    { log: ctx.log },
  );

  const batchSize = Math.max(1, ctx.config.embeddings.batchSize);
  let done = 0;
  let after = '';
  for (;;) {
    const page = await chunkTextsAfter(db, after, batchSize);
    if (page.length === 0) break;
    const vectors = await embedder.embed(page.map((c) => c.text));
    if (vectors.length !== page.length) throw new Error(`embedder returned ${vectors.length} vectors for ${page.length} texts`);
    await updateChunkEmbeddings(
      db,
      page.map((c, i) => ({ id: c.id, text: c.text, embedding: packVector(vectors[i]!, embedder.dimensions) })),
    );
    done += page.length;
    after = page[page.length - 1]!.id;
    options.onProgress?.(done, total);
  }

  await createEmbeddingIndex(db);
  await setEmbeddingModelOfIndexedUploads(db, embedder.id, clock.now());
  await writeEmbedderState(db, { id: embedder.id, dimensions: embedder.dimensions, complete: true }, clock.now());
  const result = { embedder: embedder.id, dimensions: embedder.dimensions, previous, chunks: done, resized, ms: Math.round(performance.now() - started) };
  ctx.log?.info(result, 're-embedding finished');
  return result;
}

export type EmbedderCheck =
  | { status: 'recorded' | 'ok' | 'adopted'; embedder: string }
  | { status: 'mismatch' | 'incomplete'; embedder: string; stored: EmbedderState; message: string }
  | { status: 'unavailable'; message: string };

/**
 * At start: compares the embedder that wrote the stored vectors with the configured one.
 * Nothing stored yet → the configured one is recorded (and the column sized for it when no chunk
 * exists). A different one with chunks stored → an error is logged and ingestion refuses to run
 * (uploads end in 'error' with the re-embed hint) until `npm run cli -- reembed` is run.
 *
 * Every node runs this at boot. Whatever writes (the state, the column) happens in one transaction
 * under an advisory lock, deciding again under it: two nodes starting together never resize the
 * column at once, and the second one finds the first one's result.
 */
export async function checkEmbedder(ctx: ReembedContext & { providers: { readonly embedder: Embedder } }): Promise<EmbedderCheck> {
  const clock = ctx.clock ?? systemClock;
  let embedder: Embedder;
  try {
    embedder = ctx.providers.embedder;
  } catch (err) {
    const message = `embedding provider unavailable: ${(err as Error).message}`;
    ctx.log?.error({ err }, message);
    return { status: 'unavailable', message };
  }
  const matches = (s: EmbedderState | undefined): boolean => s !== undefined && s.id === embedder.id && s.dimensions === embedder.dimensions;
  const seen = await readEmbedderState(ctx.db);
  if (matches(seen) && seen?.complete) return { status: 'ok', embedder: embedder.id };

  const check = await retryOnLockConflict(
    () =>
      ctx.db.transaction(async (tx): Promise<EmbedderCheck> => {
        await lockEmbedderChanges(tx);
        const stored = await readEmbedderState(tx, { lock: 'update' });
        if (matches(stored) && stored?.complete) return { status: 'ok', embedder: embedder.id };
        const chunks = await countChunks(tx);
        if (chunks === 0) {
          // no vector to keep apart: adopt the configured embedder, sizing the empty column for it
          if ((await embeddingColumnDimensions(tx)) !== embedder.dimensions) {
            await dropEmbeddingIndex(tx);
            await resizeEmbeddingColumn(tx, embedder.dimensions);
          }
          await createEmbeddingIndex(tx);
          await writeEmbedderState(tx, { id: embedder.id, dimensions: embedder.dimensions, complete: true }, clock.now());
          return { status: stored ? 'adopted' : 'recorded', embedder: embedder.id };
        }
        if (!stored) {
          // vectors from before the bookkeeping existed: assume the configured model wrote them
          await writeEmbedderState(tx, { id: embedder.id, dimensions: embedder.dimensions, complete: true }, clock.now());
          return { status: 'recorded', embedder: embedder.id };
        }
        if (matches(stored)) {
          return { status: 'incomplete', embedder: embedder.id, stored, message: `a re-embedding with ${embedder.id} did not finish: run \`npm run cli -- reembed\` again` };
        }
        const localV1 = stored.id.startsWith('local:hashed-ngrams-v1:') && embedder.id.startsWith('local:') && stored.dimensions === embedder.dimensions;
        const message =
          `The stored vectors were made by ${stored.id} (${stored.dimensions} dims) but the configured embedder is ${embedder.id} (${embedder.dimensions} dims); ${EMBEDDER_CHANGED_MESSAGE}` +
          (localV1 ? ', or set EMBEDDINGS_LOCAL_VERSION=1 to keep them' : '');
        return { status: 'mismatch', embedder: embedder.id, stored, message };
      }),
    { log: ctx.log },
  );
  if (check.status === 'incomplete' || check.status === 'mismatch') ctx.log?.error({ stored: check.stored, configured: embedder.id }, check.message);
  return check;
}
