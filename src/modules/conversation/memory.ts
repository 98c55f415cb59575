import type { AppContext } from '../../context.js';
import type { AuthContext } from '../identity/auth-context.js';
import { listPersonalOf, listSharedOf } from '../memory/memory.repository.js';

export interface MemoryParameter {
  key: string;
  value: string;
  description?: string;
}

/** Rows given to the model at most: the prompt stays bounded whatever a user stores. */
const MAX_MEMORY_PARAMETERS = 50;

/**
 * The memory parameters a Q&A request may draw on (the prompt's memory section and the
 * memory_lookup tool): the caller's personal rows and the rows shared in the institution asked in,
 * the same visibility as GET /api/user/memory (the memory module's prepared statements).
 */
export async function loadMemoryParameters(ctx: AppContext, auth: AuthContext, institutionId: string | null): Promise<MemoryParameter[]> {
  const [personal, shared] = await Promise.all([
    listPersonalOf(ctx.db, auth.userId),
    institutionId && auth.memberships.has(institutionId) ? listSharedOf(ctx.db, institutionId) : Promise.resolve([]),
  ]);
  return [...personal, ...shared]
    .slice(0, MAX_MEMORY_PARAMETERS)
    .map((r) => ({ key: r.keyName, value: r.keyValue, ...(r.keyDescription ? { description: r.keyDescription } : {}) }));
}
