import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';
import { chunkRoutes } from './chunks.routes.js';
import { collectionRoutes } from './collections.routes.js';
import { registerIngestion } from './ingest/workers.js';
import { registerFileSweep } from './orphan-files.js';
import { uploadRoutes } from './uploads.routes.js';

/** Vault: uploads and their ingestion, collections, chunks and sanitize (contract §4); the sweep of stored files no upload references. */
export async function vaultRoutes(app: App, ctx: AppContext): Promise<void> {
  await uploadRoutes(app, ctx);
  await collectionRoutes(app, ctx);
  await chunkRoutes(app, ctx);
  registerIngestion(app, ctx);
  registerFileSweep(app, ctx);
}
