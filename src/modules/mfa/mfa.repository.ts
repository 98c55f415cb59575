import { and, desc, eq, isNull, sql } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { institutions, mfaChallenges, trustedDevices, users } from '../../db/schema.js';

export type ChallengeRow = typeof mfaChallenges.$inferSelect;
export type TrustedDeviceRow = typeof trustedDevices.$inferSelect;
export type ChallengePurpose = 'enroll' | 'login';

const iso = (d: Date) => d.toISOString();

// ───────────── challenges ─────────────

/**
 * Locks the user's row for the rest of the transaction, so that concurrent challenge requests of one
 * user are counted one after another and can never exceed the per-window limit together.
 */
export async function lockUser(tx: DbOrTx, userId: string): Promise<void> {
  await tx.execute(sql`select id from users where id = ${userId} for update`);
}

/** Challenges of the user created since `since`: their number and the oldest creation time. */
export async function challengesSince(db: DbOrTx, userId: string, since: Date): Promise<{ count: number; oldest: Date | null }> {
  const [row] = await rowsOf<{ n: number | string; oldest: Date | string | null }>(
    db,
    sql`select count(*)::int as n, min(created_at) as oldest from mfa_challenges where user_id = ${userId} and created_at > ${iso(since)}`,
  );
  return { count: Number(row?.n ?? 0), oldest: row?.oldest ? new Date(row.oldest) : null };
}

export async function insertChallenge(db: DbOrTx, row: typeof mfaChallenges.$inferInsert): Promise<ChallengeRow> {
  const [created] = await db.insert(mfaChallenges).values(row).returning();
  return created!;
}

export async function findChallenge(db: DbOrTx, id: string): Promise<ChallengeRow | undefined> {
  const [row] = await db.select().from(mfaChallenges).where(eq(mfaChallenges.id, id)).limit(1);
  return row;
}

/**
 * Counts one wrong code, atomically, on a challenge that is still alive. Returns the new number of
 * attempts, or null when the challenge was already used or dead.
 */
export async function countWrongAttempt(db: DbOrTx, id: string, maxAttempts: number): Promise<number | null> {
  const [row] = await db
    .update(mfaChallenges)
    .set({ attempts: sql`${mfaChallenges.attempts} + 1` })
    .where(and(eq(mfaChallenges.id, id), isNull(mfaChallenges.consumedAt), sql`${mfaChallenges.attempts} < ${maxAttempts}`))
    .returning({ attempts: mfaChallenges.attempts });
  return row ? row.attempts : null;
}

/**
 * Uses a challenge up in one statement: it succeeds only while the challenge is unused, not dead and
 * not expired, so one code can never be accepted twice, even by concurrent requests.
 */
export async function consumeChallenge(db: DbOrTx, id: string, maxAttempts: number, now: Date): Promise<ChallengeRow | undefined> {
  const [row] = await db
    .update(mfaChallenges)
    .set({ consumedAt: now })
    .where(
      and(
        eq(mfaChallenges.id, id),
        isNull(mfaChallenges.consumedAt),
        sql`${mfaChallenges.attempts} < ${maxAttempts}`,
        sql`${mfaChallenges.expiresAt} > ${iso(now)}`,
      ),
    )
    .returning();
  return row;
}

/** Closes every open challenge of a user (MFA switched off). */
export async function closeOpenChallenges(db: DbOrTx, userId: string, now: Date): Promise<void> {
  await db
    .update(mfaChallenges)
    .set({ consumedAt: now })
    .where(and(eq(mfaChallenges.userId, userId), isNull(mfaChallenges.consumedAt)));
}

// ───────────── users (the MFA state only) ─────────────

/** pending → enrolled, only if the enrolment is still pending (a cancel may have won the race). */
export async function markEnrolled(db: DbOrTx, userId: string, now: Date): Promise<boolean> {
  const rows = await db
    .update(users)
    .set({ mfaState: 'enrolled', updatedAt: now })
    .where(and(eq(users.id, userId), eq(users.mfaState, 'pending')))
    .returning({ id: users.id });
  return rows.length > 0;
}

/** Service name and AI name of the user's current institution, for the code e-mail. */
export async function currentInstitutionOf(db: DbOrTx, institutionId: string | null): Promise<{ name: string; ainame: string } | undefined> {
  if (!institutionId) return undefined;
  const [row] = await db.select({ name: institutions.name, ainame: institutions.ainame }).from(institutions).where(eq(institutions.id, institutionId)).limit(1);
  return row;
}

// ───────────── trusted devices ─────────────

export async function insertDevice(db: DbOrTx, row: typeof trustedDevices.$inferInsert): Promise<TrustedDeviceRow> {
  const [created] = await db.insert(trustedDevices).values(row).returning();
  return created!;
}

export async function findDevice(db: DbOrTx, id: string): Promise<TrustedDeviceRow | undefined> {
  const [row] = await db.select().from(trustedDevices).where(eq(trustedDevices.id, id)).limit(1);
  return row;
}

/** Marks a device of this user as used now, if it is still active; false when it is not. */
export async function touchActiveDevice(db: DbOrTx, id: string, userId: string, now: Date): Promise<boolean> {
  const rows = await db
    .update(trustedDevices)
    .set({ lastUsedAt: now })
    .where(and(eq(trustedDevices.id, id), eq(trustedDevices.userId, userId), isNull(trustedDevices.revokedAt), sql`${trustedDevices.expiresAt} > ${iso(now)}`))
    .returning({ id: trustedDevices.id });
  return rows.length > 0;
}

/** Active devices of a user (not revoked, not expired), most recently used first. */
export async function listActiveDevices(db: DbOrTx, userId: string, now: Date): Promise<TrustedDeviceRow[]> {
  return db
    .select()
    .from(trustedDevices)
    .where(and(eq(trustedDevices.userId, userId), isNull(trustedDevices.revokedAt), sql`${trustedDevices.expiresAt} > ${iso(now)}`))
    .orderBy(desc(trustedDevices.lastUsedAt), desc(trustedDevices.id));
}

/** Revokes one active device of this user; false when the user has no such active device (as listed). */
export async function revokeDevice(db: DbOrTx, id: string, userId: string, now: Date): Promise<boolean> {
  const rows = await db
    .update(trustedDevices)
    .set({ revokedAt: now })
    .where(and(eq(trustedDevices.id, id), eq(trustedDevices.userId, userId), isNull(trustedDevices.revokedAt), sql`${trustedDevices.expiresAt} > ${iso(now)}`))
    .returning({ id: trustedDevices.id });
  return rows.length > 0;
}

export async function revokeAllDevices(db: DbOrTx, userId: string, now: Date): Promise<number> {
  const rows = await db
    .update(trustedDevices)
    .set({ revokedAt: now })
    .where(and(eq(trustedDevices.userId, userId), isNull(trustedDevices.revokedAt)))
    .returning({ id: trustedDevices.id });
  return rows.length;
}
