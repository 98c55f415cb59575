import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';

/** Collections and select-all-ids. */
export async function collectionRoutes(_app: App, _ctx: AppContext): Promise<void> {}
