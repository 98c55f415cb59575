import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';

/** Vault: uploads, ingestion workers, collections, chunks, sanitize (issue: vault). */
export async function vaultRoutes(_app: App, _ctx: AppContext): Promise<void> {}
