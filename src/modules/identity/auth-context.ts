import { sql } from 'drizzle-orm';
import { rowsOf, type Db } from '../../db/client.js';
import { unauthenticated } from '../../shared/errors.js';
import type { GlobalRole, InstitutionRole, Principal } from '../tenancy/permissions.js';
import type { TokenService } from './tokens.js';

/** Who is calling: established once per request from the access token and the database. */
export interface AuthContext extends Principal {
  sessionId: string;
  email: string;
  /** The institution the token was issued for, if the caller still belongs to it. */
  institutionId: string | null;
}

interface SubjectRow {
  session_id: string;
  revoked_at: Date | string | null;
  expires_at: Date | string;
  last_activity_at: Date | string;
  user_id: string;
  account_id: string;
  email: string;
  role: GlobalRole;
  status: string;
  memberships: Array<{ i: string; r: InstitutionRole; a: string }> | string;
}

/** Activity is written at most once a minute per session, not on every request. */
const ACTIVITY_WRITE_INTERVAL_MS = 60_000;

export async function resolveAuth(db: Db, tokens: TokenService, token: string, now: Date): Promise<AuthContext> {
  const claims = await tokens.verifyAccess(token, now);
  const [row] = await rowsOf<SubjectRow>(
    db,
    sql`select s.id as session_id, s.revoked_at, s.expires_at, s.last_activity_at,
               u.id as user_id, u.account_id, u.email, u.role, u.status,
               coalesce((select json_agg(json_build_object('i', m.institution_id, 'r', m.role, 'a', i.account_id))
                           from memberships m join institutions i on i.id = m.institution_id
                          where m.user_id = u.id), '[]'::json) as memberships
          from sessions s join users u on u.id = s.user_id
         where s.id = ${claims.sessionId} and s.user_id = ${claims.userId}`,
  );
  if (!row || row.revoked_at) throw unauthenticated('Session has ended');
  if (new Date(row.expires_at).getTime() <= now.getTime()) throw unauthenticated('Session has expired');
  if (row.status !== 'active') throw unauthenticated('User is disabled');

  const list = typeof row.memberships === 'string' ? (JSON.parse(row.memberships) as SubjectRow['memberships']) : row.memberships;
  const memberships = new Map<string, { role: InstitutionRole; accountId: string }>();
  for (const m of list as Array<{ i: string; r: InstitutionRole; a: string }>) memberships.set(m.i, { role: m.r, accountId: m.a });

  if (now.getTime() - new Date(row.last_activity_at).getTime() > ACTIVITY_WRITE_INTERVAL_MS) {
    await db.execute(sql`update sessions set last_activity_at = ${now.toISOString()} where id = ${row.session_id}`);
  }

  const institutionId = claims.institutionId && memberships.has(claims.institutionId) ? claims.institutionId : null;
  return {
    userId: row.user_id,
    accountId: row.account_id,
    email: row.email,
    role: row.role,
    sessionId: row.session_id,
    institutionId,
    memberships,
  };
}

/** Reads the access token from `Authorization: Bearer` or `x-access-token`; both are accepted everywhere. */
export function tokenFromHeaders(headers: Record<string, string | string[] | undefined>): string | null {
  const auth = headers.authorization;
  if (typeof auth === 'string') {
    const m = /^Bearer\s+(.+)$/i.exec(auth.trim());
    if (m?.[1]) return m[1].trim();
  }
  const custom = headers['x-access-token'];
  if (typeof custom === 'string' && custom.trim()) return custom.trim();
  return null;
}
