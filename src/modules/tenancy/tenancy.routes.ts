import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';

/** Admin management of accounts, institutions, users, memberships and credits (contract §2). */
export async function tenancyRoutes(_app: App, _ctx: AppContext): Promise<void> {}
