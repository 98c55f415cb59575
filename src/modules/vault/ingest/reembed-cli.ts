import type { AppConfig } from '../../../config.js';
import type { Database } from '../../../db/client.js';
import { createEmbedder } from '../../../providers/embeddings/index.js';
import { reembedAll } from './reembed.js';

/**
 * `npm run cli -- reembed`: re-embeds every stored chunk with the configured embedder (EMBEDDINGS_*),
 * resizing the vector column when the dimension changed. Run it with the servers stopped, or at least
 * with none ingesting: they pick the new state up at their next job.
 */
export async function reembedFromCli(config: AppConfig, database: Database, out: (line: string) => void): Promise<void> {
  const embedder = createEmbedder(config.embeddings);
  out(`re-embedding every chunk with ${embedder.id} (${embedder.dimensions} dimensions)...`);
  let lastShown = 0;
  const result = await reembedAll(
    { db: database.db, config, providers: { embedder } },
    {
      onProgress: (done, total) => {
        if (done === total || performance.now() - lastShown > 2000) {
          lastShown = performance.now();
          out(`  ${done}/${total} chunks`);
        }
      },
    },
  );
  const from = result.previous ? `${result.previous.id} (${result.previous.dimensions} dims)` : 'nothing recorded';
  out(
    `done: ${result.chunks} chunks re-embedded in ${(result.ms / 1000).toFixed(1)} s; embedder ${from} → ${result.embedder} (${result.dimensions} dims)` +
      (result.resized ? '; vector column resized' : ''),
  );
}
