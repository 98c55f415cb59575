import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';

/** Uploads: multipart upload, list, get, download, update, delete; starts the ingestion workers. */
export async function uploadRoutes(_app: App, _ctx: AppContext): Promise<void> {}
