import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';

/** Embedding chunks: get, list by upload, update (re-embed), sanitize preview. */
export async function chunkRoutes(_app: App, _ctx: AppContext): Promise<void> {}
