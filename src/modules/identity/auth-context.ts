import { and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { accounts, sessions, users } from '../../db/schema.js';
import { unauthenticated } from '../../shared/errors.js';
import type { GlobalRole, InstitutionRole, Principal } from '../tenancy/permissions.js';
import { loginRefusal } from './identity.policy.js';
import type { AccessClaims, TokenService } from './tokens.js';
import type { ActivityRecorder, AuthCache, CachedAuth } from './auth-cache.js';

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

/** What the auth query returns for a session, memberships parsed once: the unit the cache keeps. */
export interface SessionAuth {
  row: AuthRow;
  /** Memberships that count: those of active institutions of active accounts. */
  memberships: ReadonlyMap<string, { role: InstitutionRole; accountId: string }>;
  /** Why the identity policy would refuse this user now (disabled, inactive account...), or null. */
  refusal: string | null;
}
type AuthRow = Awaited<ReturnType<ReturnType<typeof buildAuthQuery>['execute']>>[number];

/**
 * The query, when the cache does not have the session: the session, the whole user row, its
 * account's status and the memberships. The cache keys it by every institution and account it
 * depends on (inactive ones included: activating one changes the answer too).
 */
async function loadSessionAuth(db: Db, sessionId: string, userId: string): Promise<CachedAuth<SessionAuth> | undefined> {
  const [row] = await authQuery(db).execute({ sessionId, userId });
  if (!row) return undefined;
  const memberships = new Map<string, { role: InstitutionRole; accountId: string }>();
  const enrolments: Array<{ status: string; accountStatus: string }> = [];
  const institutionIds: string[] = [];
  const accountIds = new Set([row.user.accountId]);
  for (const entry of row.memberships) {
    const [institutionId, role, accountId, active] = entry.split(' ');
    const state = active === '1' ? 'active' : 'inactive';
    enrolments.push({ status: state, accountStatus: state });
    if (institutionId) institutionIds.push(institutionId);
    if (accountId) accountIds.add(accountId);
    if (institutionId && role && accountId && active === '1') memberships.set(institutionId, { role: role as InstitutionRole, accountId });
  }
  const refusal = loginRefusal(row.user, row.accountStatus, enrolments);
  return { value: { row, memberships, refusal }, userId: row.user.id, accountIds: [...accountIds], institutionIds };
}

/** The per-app pieces of authentication: the cache of session auth and the activity writer. */
export interface AuthRuntime {
  cache: AuthCache<SessionAuth>;
  activity: ActivityRecorder;
}

/**
 * The caller of a request, from the access token and the session's cached auth (one query on a
 * miss, none on a hit). Routes that need the caller's own record (GET /api/user/me) use `auth.user`
 * instead of reading it again. Everything that would refuse the session is checked here on every
 * request, against the cached values: the cache only saves the read. A user the identity policy
 * would not let log in (disabled, inactive account, only inactive institutions) is refused here too,
 * and memberships of inactive institutions do not count (only the logout lets such a user end its
 * session: resolveSessionToEnd).
 */
export async function resolveAuth(db: Db, tokens: TokenService, token: string, now: Date, runtime: AuthRuntime): Promise<AuthContext> {
  return resolveSession(db, await tokens.verifyAccess(token, now), now, runtime);
}

/**
 * The session part of `resolveAuth`, for claims already verified: a long-lived connection (a socket)
 * checks its session again with this when an invalidation concerns it, its access token having
 * possibly expired since the handshake. `recordActivity` false for checks that are not the user's doing
 * (a socket checked again because of someone else's change): the session's lastActivityAt stays as it is.
 */
export async function resolveSession(
  db: Db,
  claims: Pick<AccessClaims, 'sessionId' | 'userId' | 'institutionId'>,
  now: Date,
  runtime: AuthRuntime,
  recordActivity = true,
): Promise<AuthContext> {
  const nowMs = now.getTime();
  const entry = await liveSession(db, claims, nowMs, runtime);
  const { row, memberships, refusal } = entry.value;
  if (refusal) throw unauthenticated(refusal);

  // Off the request path: queued, written by one statement shortly after; at most once a minute per session.
  if (recordActivity && nowMs - Math.max(entry.activityAt, row.lastActivityAt.getTime()) > ACTIVITY_WRITE_INTERVAL_MS) {
    entry.activityAt = nowMs;
    runtime.activity.record(claims.sessionId, now);
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

/**
 * The session of a verified access token, when it exists, is the token user's, and is neither revoked nor
 * expired (401 otherwise): the checks every request makes. The identity policy's refusal is left to the caller
 * (in the entry). A refusal can end without this service writing anything (a reactivation through another tool):
 * refused answers are not kept, so the next request reads again. Ended sessions stay cached: they never come back.
 */
async function liveSession(db: Db, claims: Pick<AccessClaims, 'sessionId' | 'userId'>, nowMs: number, runtime: AuthRuntime) {
  const entry = await runtime.cache.get(claims.sessionId, nowMs, () => loadSessionAuth(db, claims.sessionId, claims.userId));
  // the query matches session AND user; a cached entry must too
  if (!entry || entry.userId !== claims.userId) throw unauthenticated('Session has ended');
  const { row, refusal } = entry.value;
  if (row.revokedAt) throw unauthenticated('Session has ended');
  if (row.expiresAt.getTime() <= nowMs) throw unauthenticated('Session has expired');
  if (refusal) runtime.cache.forget(claims.sessionId);
  return entry;
}

/**
 * The session an access token may end (POST /api/auth/logout, and nothing else): the token is verified and its
 * session checked as by resolveAuth, but the identity policy's refusal (a disabled user, an inactive account, a
 * plain user whose every institution is inactive) does not stop it. Ending one's own session is what such a
 * refusal wants anyway; refusing the logout only kept the session alive, to work again once reactivated. No
 * auth context comes out of it (the refused user may do nothing else), and no activity is recorded.
 */
export async function resolveSessionToEnd(db: Db, tokens: TokenService, token: string, now: Date, runtime: AuthRuntime): Promise<{ sessionId: string; userId: string }> {
  const claims = await tokens.verifyAccess(token, now);
  await liveSession(db, claims, now.getTime(), runtime);
  return { sessionId: claims.sessionId, userId: claims.userId };
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
