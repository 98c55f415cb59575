import { and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { accounts, sessions, users } from '../../db/schema.js';
import { unauthenticated } from '../../shared/errors.js';
import type { GlobalRole, InstitutionRole, Principal } from '../tenancy/permissions.js';
import { loginRefusal } from './identity.policy.js';
import type { TokenService } from './tokens.js';

/** Who is calling: established once per request from the access token and the database. */
export interface AuthContext extends Principal {
  sessionId: string;
  email: string;
  /** The institution the token was issued for, if the caller still belongs to it. */
  institutionId: string | null;
  /** The caller's user row as read when the request was authenticated. */
  user: typeof users.$inferSelect;
}

/** Activity is written at most once a minute per session, not on every request. */
const ACTIVITY_WRITE_INTERVAL_MS = 60_000;

/**
 * Memberships as "institutionId role accountId active" strings (active: 1 when the institution and its
 * account are active, else 0): cheaper to build in SQL than JSON.
 */
type MembershipList = string[];

/**
 * Built once per database handle and reused: building the SQL of this query costs more than running it
 * on the embedded database, and it runs on every authenticated request.
 */
const prepared = new WeakMap<Db, ReturnType<typeof buildAuthQuery>>();
const authQuery = (db: Db) => {
  let q = prepared.get(db);
  if (!q) prepared.set(db, (q = buildAuthQuery(db)));
  return q;
};

function buildAuthQuery(db: Db) {
  return db
    .select({
      user: users,
      revokedAt: sessions.revokedAt,
      expiresAt: sessions.expiresAt,
      lastActivityAt: sessions.lastActivityAt,
      accountStatus: accounts.status,
      memberships: sql<MembershipList>`array(select m.institution_id || ' ' || m.role || ' ' || i.account_id || ' ' ||
                              case when i.status = 'active' and ia.status = 'active' then '1' else '0' end
                       from memberships m join institutions i on i.id = m.institution_id join accounts ia on ia.id = i.account_id
                      where m.user_id = ${users.id})`,
    })
    .from(sessions)
    .innerJoin(users, eq(users.id, sessions.userId))
    .innerJoin(accounts, eq(accounts.id, users.accountId))
    .where(and(eq(sessions.id, sql.placeholder('sessionId')), eq(sessions.userId, sql.placeholder('userId'))))
    .limit(1)
    .prepare('resolve_auth');
}

/**
 * One query per request: the session, the whole user row, its account's status and the memberships.
 * Routes that need the caller's own record (GET /api/user/me) use `auth.user` instead of reading it
 * again. A user the identity policy would not let log in (disabled, inactive account, only inactive
 * institutions) is refused here too, and memberships of inactive institutions do not count.
 */
export async function resolveAuth(db: Db, tokens: TokenService, token: string, now: Date): Promise<AuthContext> {
  const claims = await tokens.verifyAccess(token, now);
  const [row] = await authQuery(db).execute({ sessionId: claims.sessionId, userId: claims.userId });
  if (!row || row.revokedAt) throw unauthenticated('Session has ended');
  if (row.expiresAt.getTime() <= now.getTime()) throw unauthenticated('Session has expired');

  const memberships = new Map<string, { role: InstitutionRole; accountId: string }>();
  const enrolments: Array<{ status: string; accountStatus: string }> = [];
  for (const entry of row.memberships) {
    const [institutionId, role, accountId, active] = entry.split(' ');
    const state = active === '1' ? 'active' : 'inactive';
    enrolments.push({ status: state, accountStatus: state });
    if (institutionId && role && accountId && active === '1') memberships.set(institutionId, { role: role as InstitutionRole, accountId });
  }
  const refusal = loginRefusal(row.user, row.accountStatus, enrolments);
  if (refusal) throw unauthenticated(refusal);

  if (now.getTime() - row.lastActivityAt.getTime() > ACTIVITY_WRITE_INTERVAL_MS) {
    await db.update(sessions).set({ lastActivityAt: now }).where(eq(sessions.id, claims.sessionId));
  }

  const institutionId = claims.institutionId && memberships.has(claims.institutionId) ? claims.institutionId : null;
  return {
    userId: row.user.id,
    accountId: row.user.accountId,
    email: row.user.email,
    role: row.user.role as GlobalRole,
    sessionId: claims.sessionId,
    institutionId,
    memberships,
    user: row.user,
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
