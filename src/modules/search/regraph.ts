import type { Db } from '../../db/client.js';
import { extractEntities } from './graph.js';
import { chunkTextsOfUpload, clearMentionsOf, insertMentions, refreshUploadIndex, uploadsWithChunks } from './search.repository.js';
import { yieldToLoop } from '../../shared/slices.js';

/**
 * `npm run cli -- regraph`: (re)builds the knowledge graph and the BM25 statistics of every upload that
 * has chunks (uploads indexed before the graph existed, or after a change of the extractor). One
 * transaction per upload: a search sees an upload's old graph or its new one, never half of it.
 * Safe to run again; safe while servers run (each upload's rows are replaced atomically).
 */
export async function regraphAll(db: Db, onProgress?: (done: number, total: number) => void): Promise<{ uploads: number; chunks: number; ms: number }> {
  const started = performance.now();
  const uploads = await uploadsWithChunks(db);
  let chunks = 0;
  let done = 0;
  for (const uploadId of uploads) {
    const texts = await chunkTextsOfUpload(db, uploadId);
    const rows = texts.map((c) => ({ chunkId: c.id, mentions: extractEntities(c.text) }));
    await db.transaction(async (tx) => {
      await clearMentionsOf(tx, uploadId);
      await insertMentions(tx, uploadId, rows);
      await refreshUploadIndex(tx, uploadId);
    });
    chunks += texts.length;
    done++;
    onProgress?.(done, uploads.length);
    await yieldToLoop();
  }
  return { uploads: uploads.length, chunks, ms: Math.round(performance.now() - started) };
}
