import type { AppContext } from '../../context.js';
import { badField, forbidden, validationFailed } from '../../shared/errors.js';
import type { AuthContext } from '../identity/auth-context.js';
import type { Method } from './fusion.js';
import { canChooseSearchMethod } from './search.policy.js';
import { MAX_QUERY_CHARS, type SearchContentBody } from './search.schemas.js';
import { MAX_SELECTED_IDS, retrieve } from './retrieve.js';

const SINGLE: Record<string, Method[]> = { dense: ['dense'], lexical: ['lexical'], kag: ['kag'] };

/** Content search over the caller's eligible vault (spec: POST /api/user/files/search-content). */
export class SearchService {
  constructor(private readonly ctx: AppContext) {}

  /**
   * The request's own checks (400, 403). The route runs them before the rate limiter counts the request
   * (a refused request does not use up the caller's searches), and searchContent runs them again.
   */
  checkRequest(auth: AuthContext, body: SearchContentBody): { query: string; methods: Method[] | undefined } {
    const query = body.query.trim();
    if (query.length === 0) throw badField('query', 'query must not be blank');
    // characters (code points), not UTF-16 units: an emoji is one character
    if (query.length > MAX_QUERY_CHARS && [...query].length > MAX_QUERY_CHARS) throw badField('query', `query must be at most ${MAX_QUERY_CHARS} characters`);
    if (body.selectedUploadIds && body.selectedUploadIds.length > MAX_SELECTED_IDS) {
      throw validationFailed(`selectedUploadIds holds at most ${MAX_SELECTED_IDS} ids`, [{ field: 'selectedUploadIds', message: `at most ${MAX_SELECTED_IDS} ids` }]);
    }
    let methods: Method[] | undefined;
    if (body.method && body.method !== 'fused') {
      if (!canChooseSearchMethod(auth)) throw forbidden('Choosing a single retrieval method is for superadmins (evaluation)');
      methods = SINGLE[body.method];
    }
    return { query, methods };
  }

  async searchContent(auth: AuthContext, body: SearchContentBody) {
    const { query, methods } = this.checkRequest(auth, body);
    // non-string entries are malformed ids: dropped silently like foreign ones
    const uploadIds = body.selectedUploadIds?.filter((v): v is string => typeof v === 'string');
    const out = await retrieve(this.ctx, auth, query, { limit: body.limit ?? 10, uploadIds, minScore: body.minScore, methods });
    return {
      success: true as const,
      query: body.query,
      // the chunk text stays on the server: the snippet is what a client sees (and `[confidential]` hides it)
      results: out.results.map(({ text: _text, ...hit }) => ({ _id: hit.chunkId, ...hit })),
      totalScanned: out.totalScanned,
      uploadCount: out.uploadCount,
      tookMs: out.tookMs,
    };
  }
}
