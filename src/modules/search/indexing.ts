import { sql } from 'drizzle-orm';
import type { DbOrTx } from '../../db/client.js';
import { extractEntities } from './graph.js';
import { insertChunkBatch, insertMentions, refreshUploadIndex, type ChunkToWrite } from './search.repository.js';

/**
 * What ingestion calls to index chunks: the chunk rows (text, vector, tsvector, BM25 length) and their
 * knowledge-graph mentions, then, once every chunk of the upload is written, the upload's derived rows
 * (BM25 statistics, entities, co-occurrence edges). Ingestion brings each chunk's entities, found in its
 * sandbox process (prepare.ts): at ~0.6 ms a chunk, a batch of 200 found here would hold the request loop
 * for ~120 ms. Other writers (a chunk edit, a few rows) let them be found here.
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

/** After the last chunk of an upload is written (same transaction as its activation). */
export async function finishUploadIndex(tx: DbOrTx, uploadId: string): Promise<void> {
  await refreshUploadIndex(tx, uploadId);
}

/** Removes an upload's chunks and every row derived from them (failed or repeated ingestion). */
export { removeUploadIndex as deleteChunksOf, type ChunkToWrite } from './search.repository.js';

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
  await db.execute(sql`analyze uploads, chunks, chunk_vectors, chunk_vectors_staged, upload_index_stats, kg_entities, kg_mentions, kg_edges`);
  analysedAt += indexedSince + (analysedAt < 0 ? 1 : 0);
  indexedSince = 0;
}
