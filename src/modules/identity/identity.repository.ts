import { and, asc, eq, isNull, ne, sql } from 'drizzle-orm';
import type { DbOrTx } from '../../db/client.js';
import { accounts, institutions, memberships, sessions, users } from '../../db/schema.js';
import { withNfc } from '../../db/values.js';

export type UserRow = typeof users.$inferSelect;
export type SessionRow = typeof sessions.$inferSelect;

export async function findUserByEmail(db: DbOrTx, email: string): Promise<UserRow | undefined> {
  // e-mails are stored in NFC (tenancy.repository insertUser): an address typed decomposed is the same one
  const [row] = await db.select().from(users).where(sql`lower(${users.email}) = lower(${email.normalize('NFC')})`).limit(1);
  return row;
}

export async function findUserById(db: DbOrTx, id: string): Promise<UserRow | undefined> {
  const [row] = await db.select().from(users).where(eq(users.id, id)).limit(1);
  return row;
}

export async function insertSession(db: DbOrTx, row: typeof sessions.$inferInsert): Promise<void> {
  await db.insert(sessions).values(row);
}

export async function findSession(db: DbOrTx, id: string): Promise<SessionRow | undefined> {
  const [row] = await db.select().from(sessions).where(eq(sessions.id, id)).limit(1);
  return row;
}

/**
 * Rotates a refresh token in one statement: it succeeds only if the presented hash is still the
 * current one, so two uses of the same token can never both succeed. The replaced hash is kept as
 * `previous_refresh_hash`, so that a later use of it is recognised as reuse (see revokeOnReuse).
 */
export async function rotateRefresh(
  db: DbOrTx,
  sessionId: string,
  presentedHash: string,
  newHash: string,
  now: Date,
  institutionId?: string | null,
): Promise<SessionRow | undefined> {
  const [row] = await db
    .update(sessions)
    .set({ refreshHash: newHash, previousRefreshHash: presentedHash, lastActivityAt: now, ...(institutionId !== undefined ? { institutionId } : {}) })
    .where(and(eq(sessions.id, sessionId), eq(sessions.refreshHash, presentedHash), isNull(sessions.revokedAt), sql`${sessions.expiresAt} > ${now.toISOString()}`))
    .returning();
  return row;
}

/**
 * Revokes a live session when the presented refresh token was valid for it once and has been rotated away:
 * a copy of it exists. For a token this service issued for the session (`issued`: its MAC says so,
 * tokens.parseRefresh), any token but the current one, however many rotations ago; for a token issued before
 * tokens carried their MAC, the one the last rotation replaced. A hash that never belonged to the session
 * (a guess) matches nothing and revokes nothing. True when it revoked.
 */
export async function revokeOnReuse(db: DbOrTx, sessionId: string, presentedHash: string, issued: boolean, now: Date): Promise<boolean> {
  const rotatedAway = issued
    ? and(ne(sessions.refreshHash, presentedHash), sql`${sessions.expiresAt} > ${now.toISOString()}`)
    : eq(sessions.previousRefreshHash, presentedHash);
  const rows = await db
    .update(sessions)
    .set({ revokedAt: now, revokedReason: 'refresh-token-reuse' })
    .where(and(eq(sessions.id, sessionId), rotatedAway, isNull(sessions.revokedAt)))
    .returning({ id: sessions.id });
  return rows.length > 0;
}

/** Moves a live session to another current institution, or to none (its refresh token stays as it is). */
export async function setSessionInstitution(db: DbOrTx, sessionId: string, institutionId: string | null, now: Date): Promise<boolean> {
  const rows = await db
    .update(sessions)
    .set({ institutionId, lastActivityAt: now })
    .where(and(eq(sessions.id, sessionId), isNull(sessions.revokedAt), sql`${sessions.expiresAt} > ${now.toISOString()}`))
    .returning({ id: sessions.id });
  return rows.length > 0;
}

export async function accountStatus(db: DbOrTx, accountId: string): Promise<string | undefined> {
  const [row] = await db.select({ status: accounts.status }).from(accounts).where(eq(accounts.id, accountId)).limit(1);
  return row?.status;
}

export async function revokeSession(db: DbOrTx, sessionId: string, reason: string, now: Date): Promise<void> {
  await db.update(sessions).set({ revokedAt: now, revokedReason: reason }).where(and(eq(sessions.id, sessionId), isNull(sessions.revokedAt)));
}

/** Revokes every open session of a user, except `keepSessionId` when given. */
export async function revokeUserSessions(db: DbOrTx, userId: string, reason: string, now: Date, keepSessionId?: string): Promise<void> {
  await db
    .update(sessions)
    .set({ revokedAt: now, revokedReason: reason })
    .where(and(eq(sessions.userId, userId), isNull(sessions.revokedAt), keepSessionId ? ne(sessions.id, keepSessionId) : undefined));
}

export async function updateUser(db: DbOrTx, id: string, patch: Partial<typeof users.$inferInsert>, now: Date): Promise<UserRow | undefined> {
  const [row] = await db
    .update(users)
    .set({ ...withNfc(patch, ['email', 'fname', 'lname'] as const), updatedAt: now })
    .where(eq(users.id, id))
    .returning();
  return row;
}

export interface EnrolmentRow {
  institutionId: string;
  role: string;
  name: string;
  ainame: string;
  picture: string;
  accountId: string;
  status: string;
  /** Status of the institution's account (an inactive account makes its institutions inactive too). */
  accountStatus: string;
  publicId: string;
}

export async function listEnrolments(db: DbOrTx, userId: string): Promise<EnrolmentRow[]> {
  return db
    .select({
      institutionId: memberships.institutionId,
      role: memberships.role,
      name: institutions.name,
      ainame: institutions.ainame,
      picture: institutions.picture,
      accountId: institutions.accountId,
      status: institutions.status,
      accountStatus: accounts.status,
      publicId: institutions.publicId,
    })
    .from(memberships)
    .innerJoin(institutions, eq(institutions.id, memberships.institutionId))
    .innerJoin(accounts, eq(accounts.id, institutions.accountId))
    .where(eq(memberships.userId, userId))
    .orderBy(asc(institutions.name));
}

export async function findMembership(db: DbOrTx, userId: string, institutionId: string) {
  const [row] = await db
    .select()
    .from(memberships)
    .where(and(eq(memberships.userId, userId), eq(memberships.institutionId, institutionId)))
    .limit(1);
  return row;
}
