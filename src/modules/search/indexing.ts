import { sql } from 'drizzle-orm';
import type { FastifyBaseLogger } from 'fastify';
import type { DbOrTx } from '../../db/client.js';
import { edgeLists, entityRows, extractEntities, graphNames, type UploadGraph } from './graph.js';
import { searchableStatus } from './search.policy.js';
import { insertChunkBatch, insertGraphRows, insertMentions, scopeUploads, type ChunkToWrite } from './search.repository.js';
import type { SegmentCache } from './segments.js';

/**
 * What ingestion calls to index chunks: the chunk rows (text, tsvector, BM25 length, staged vector) and
 * their knowledge-graph mentions; then the upload's entities and edges (writeUploadGraph) and, in the
 * transaction that activates it, its BM25 statistics with a new version (refreshUploadStatistics).
 * Ingestion brings each chunk's entities and the file's graph rows, computed in its sandbox process
 * (prepare.ts): at ~0.6 ms a chunk, a batch of 200 found here would hold the request loop for ~120 ms.
 * Other writers (a few rows, tools) let mentions be found here and finish with refreshUploadIndex, which
 * recomputes the statistics and the graph rows from the stored mentions (a chunk edit recomputes only the
 * rows it touches: search.repository's replaceChunkText).
 */
export async function writeIndexedChunks(db: DbOrTx, uploadId: string, rows: ChunkToWrite[], now: Date): Promise<void> {
  if (rows.length === 0) return;
  await insertChunkBatch(db, uploadId, rows, now);
  await insertMentions(
    db,
    uploadId,
    rows.map((r) => ({ chunkId: r.id, mentions: r.mentions ?? extractEntities(r.text) })),
  );
}

/** Entity rows per statement: ~7 µs a row on the embedded engine (written in key order), so ~30 ms a statement. */
const ENTITIES_PER_STATEMENT = 4000;
/** Edges per statement, in whole lists: ~1.5 µs an edge, so ~25 ms a statement. */
const EDGES_PER_STATEMENT = 16_000;

/**
 * The upload's entity rows and edge lists (graph.ts uploadGraph of all its chunks' mentions), in statements
 * of ENTITIES_PER_STATEMENT entities or about EDGES_PER_STATEMENT edges (a list is never split); `between` runs after
 * each (a turn of the event loop, an abort check).
 */
export async function writeUploadGraph(db: DbOrTx, uploadId: string, graph: UploadGraph, between?: () => Promise<void>): Promise<void> {
  const names = graphNames(graph);
  for (let i = 0; i < names.length; i += ENTITIES_PER_STATEMENT) {
    await insertGraphRows(db, uploadId, { entities: entityRows(graph, names, i, i + ENTITIES_PER_STATEMENT), edgeLists: [] });
    await between?.();
  }
  const lists = edgeLists(graph, names);
  for (let i = 0; i < lists.length; ) {
    let end = i;
    for (let edges = 0; end < lists.length && edges < EDGES_PER_STATEMENT; end++) edges += lists[end]![1].length;
    await insertGraphRows(db, uploadId, { entities: [], edgeLists: lists.slice(i, end) });
    await between?.();
    i = end;
  }
}

export { refreshUploadStatistics } from './search.repository.js';

/** Removes an upload's chunks and every row derived from them (failed or repeated ingestion). */
export { removeUploadIndex as deleteChunksOf, type ChunkToWrite } from './search.repository.js';

/** The search tables and the columns their queries filter or join on (refreshPlannerStatistics). */
const ANALYZED = [
  'uploads',
  'chunks (id, upload_id, chunk_index, lex_len)',
  'chunk_vectors (chunk_id, upload_id)',
  'chunk_vectors_staged (chunk_id, upload_id)',
  'upload_index_stats',
  'kg_entities (upload_id, name)',
  'kg_mentions (chunk_id, upload_id)',
  'kg_edge_lists (upload_id)',
];

/**
 * PGlite has no autovacuum daemon, so nothing refreshes the planner's statistics: with the tables grown
 * from empty, it keeps believing they hold a few rows and picks nested loops that cost seconds on a
 * thousand files. After ingestion, when the indexed rows grew by a quarter since the last ANALYZE of
 * this process (or it never ran), the search tables are analysed. On PostgreSQL autovacuum does it.
 */
let analysedAt = -1;
let indexedSince = 0;
export async function refreshPlannerStatistics(db: DbOrTx, chunksWritten: number, kind: 'pglite' | 'postgres' | undefined): Promise<void> {
  if (kind === 'postgres') return;
  indexedSince += chunksWritten;
  if (analysedAt >= 0 && indexedSince < Math.max(200, analysedAt / 4)) return;
  // one short statement a table, and only the columns queries filter or join on: statistics of the text,
  // tsvector and array columns cost ~0.4 s at 6,000 chunks, one statement the whole app would wait behind
  for (const target of ANALYZED) await db.execute(sql.raw(`analyze ${target}`));
  analysedAt += indexedSince + (analysedAt < 0 ? 1 : 0);
  indexedSince = 0;
}

/**
 * Reads newly active uploads' lexical and graph indexes into this node's memory (SegmentCache.warm), in
 * the background, so that the first search of a new file does not: in small statements, each after
 * `giveWay` (on PGlite, the wait for requests to leave the engine alone). Stopped before the database
 * closes: a read in progress ends at its next statement, and later calls do nothing.
 */
export class IndexWarmer {
  private stopped = false;
  private readonly inProgress = new Set<Promise<void>>();

  constructor(
    private readonly db: DbOrTx,
    private readonly index: SegmentCache,
    private readonly log: FastifyBaseLogger,
    private readonly giveWay?: () => Promise<void>,
  ) {}

  warm(uploadId: string): void {
    if (this.stopped) return;
    const pace = async () => {
      if (this.stopped) throw new Error('the index warmer is stopped');
      await this.giveWay?.();
    };
    const read = (async () => this.index.warm(this.db, await scopeUploads(this.db, sql`${searchableStatus()} and u.id = ${uploadId}`), pace))()
      .catch((err: unknown) => {
        if (!this.stopped) this.log.warn({ err, uploadId }, "reading a new file's search index into memory failed; its first search will");
      })
      .finally(() => this.inProgress.delete(read));
    this.inProgress.add(read);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.inProgress]);
  }
}
