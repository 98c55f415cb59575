import type { AppContext } from '../../context.js';
import { dateTimeField } from '../../shared/date-time-field.js';
import { badField } from '../../shared/errors.js';
import { isUuid } from '../../shared/ids.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import { findInstitution } from '../tenancy/tenancy.repository.js';
import { sessionsAccountFilter, sessionsInstitutionFilter, sessionsScope, visibleSessionTenancy } from './sessions.policy.js';
import { listSessions, type SessionListRow } from './sessions.repository.js';
import type { SessionsListInput } from './sessions.schemas.js';
import { searchTerm } from '../../db/search.js';

const DEFAULT_RANGE_MS = 30 * 86_400_000;

/** Space-separated ids of a body field; malformed ones are a 400. Empty: no filter. */
export function idListField(field: string, value: string | undefined): string[] | undefined {
  const ids = (value ?? '').split(/\s+/).filter(Boolean);
  if (ids.some((id) => !isUuid(id))) throw badField(field, `${field} must be ids separated by spaces`);
  return ids.length > 0 ? ids : undefined;
}

/** A session as the caller may see it: its account and institution only where sessions.policy visibleSessionTenancy lets it. */
function presentSession(auth: AuthContext, r: SessionListRow) {
  const { account, institution } = visibleSessionTenancy(auth, r);
  return {
    _id: r.id,
    user: { _id: r.userId, email: r.email, fname: r.fname, lname: r.lname },
    account,
    institution,
    ip: r.ip,
    ua: r.ua,
    created: r.createdAt.toISOString(),
    lastActivityAt: r.lastActivityAt.toISOString(),
    expiresAt: r.expiresAt.toISOString(),
    revoked: r.revokedAt !== null,
  };
}

export class AdminSessionsService {
  constructor(private readonly ctx: AppContext) {}

  async list(auth: AuthContext, input: SessionsListInput) {
    const scope = sessionsScope(auth);
    const { page, pageSize, limit, offset } = pageWindow({ page: input.page, pageSize: input.pageSize ?? input.limitsearch });
    const now = this.ctx.clock.now();
    const [fromText, toText] = input.daterange ?? [];
    const from = fromText ? dateTimeField('daterange.0', fromText) : new Date(now.getTime() - DEFAULT_RANGE_MS);
    const to = toText ? dateTimeField('daterange.1', toText) : now;
    if (from.getTime() > to.getTime()) throw badField('daterange', 'daterange must be [startDate, endDate] with startDate not after endDate');
    const usersearch = searchTerm(input.usersearch);
    const institution = input.institution === undefined ? undefined : await findInstitution(this.ctx.db, input.institution);
    const { rows, total } = await listSessions(
      this.ctx.db,
      {
        scope,
        accountIds: sessionsAccountFilter(auth, idListField('account', input.account)),
        institutionIds: sessionsInstitutionFilter(auth, input.institution, institution),
        usersearch,
        from,
        to,
      },
      { limit, offset },
    );
    return envelope(rows.map((r) => presentSession(auth, r)), total, page, pageSize);
  }
}
