import type { DbOrTx } from '../../db/client.js';
import { extractEntities } from './graph.js';
import { insertChunkBatch, insertMentions, refreshUploadIndex, type ChunkToWrite } from './search.repository.js';

/**
 * What ingestion calls to index chunks: the chunk rows (text, vector, tsvector, BM25 length) and their
 * knowledge-graph mentions, then, once every chunk of the upload is written, the upload's derived rows
 * (BM25 statistics, entities, co-occurrence edges). Entity extraction is a linear regex pass (well under
 * a millisecond a chunk): cheap enough to run inline between the yields of the pipeline.
 */
export async function writeIndexedChunks(db: DbOrTx, uploadId: string, rows: ChunkToWrite[], now: Date): Promise<void> {
  if (rows.length === 0) return;
  await insertChunkBatch(db, uploadId, rows, now);
  await insertMentions(
    db,
    uploadId,
    rows.map((r) => ({ chunkId: r.id, mentions: extractEntities(r.text) })),
  );
}

/** After the last chunk of an upload is written (same transaction as its activation). */
export async function finishUploadIndex(tx: DbOrTx, uploadId: string): Promise<void> {
  await refreshUploadIndex(tx, uploadId);
}

/** Removes an upload's chunks and every row derived from them (failed or repeated ingestion). */
export { removeUploadIndex as deleteChunksOf, type ChunkToWrite } from './search.repository.js';
