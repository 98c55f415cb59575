import type { AppContext } from '../../context.js';
import type { AuthContext } from '../identity/auth-context.js';

export interface MemoryParameter {
  key: string;
  value: string;
  description?: string;
}

/**
 * The memory parameters a Q&A request may draw on (the prompt's memory section and the
 * memory_lookup tool): the caller's personal rows and the rows shared in the institution asked in.
 *
 * The memory table belongs to the memory module (issue 10), built in parallel; it does not exist on
 * this branch yet, so this port answers with no rows. At merge this function reads that module's
 * repository (one query, the same visibility as GET /api/user/memory); nothing else in the pipeline
 * changes. The prompt generators and the tool are already tested with memory rows.
 */
export async function loadMemoryParameters(_ctx: AppContext, _auth: AuthContext, _institutionId: string | null): Promise<MemoryParameter[]> {
  return [];
}
