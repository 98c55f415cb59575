import { TransactionRollbackError, and, eq, gt, sql } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { creditAwards, creditLedger, institutions, users } from '../../db/schema.js';
import { inList } from '../../db/search.js';
import { newId } from '../../shared/ids.js';

/**
 * Every change of a credit balance goes through here: one conditional UPDATE (the balance never goes
 * below zero, concurrent changes never lose an update) and, in the same transaction, its row in
 * credit_ledger, so that balance = sum(delta) of the balance's rows.
 */

export type LedgerKind = 'topup' | 'correction' | 'transfer_out' | 'transfer_in' | 'award';

export interface Movement {
  kind: LedgerKind;
  actorUserId?: string | null;
  refId?: string | null;
  note?: string | null;
}

/** Adds `delta` (negative: takes) to an institution's balance and records it; undefined when it would go below zero or there is no such institution. */
export async function moveInstitutionCredits(db: DbOrTx, institutionId: string, delta: number, movement: Movement): Promise<number | undefined> {
  const [row] = await db
    .update(institutions)
    .set({ credits: sql`${institutions.credits} + ${delta}::numeric`, updatedAt: sql`now()` })
    .where(and(eq(institutions.id, institutionId), sql`${institutions.credits} + ${delta}::numeric >= 0`))
    .returning({ credits: institutions.credits, accountId: institutions.accountId });
  if (!row) return undefined;
  await db.insert(creditLedger).values({ id: newId(), accountId: row.accountId, institutionId, delta, ...ledgerFields(movement) });
  return Number(row.credits);
}

/** Same as moveInstitutionCredits, for a user's own balance. */
export async function moveUserCredits(db: DbOrTx, userId: string, delta: number, movement: Movement): Promise<number | undefined> {
  const [row] = await db
    .update(users)
    .set({ credits: sql`${users.credits} + ${delta}::numeric`, updatedAt: sql`now()` })
    .where(and(eq(users.id, userId), sql`${users.credits} + ${delta}::numeric >= 0`))
    .returning({ credits: users.credits, accountId: users.accountId });
  if (!row) return undefined;
  await db.insert(creditLedger).values({ id: newId(), accountId: row.accountId, userId, delta, ...ledgerFields(movement) });
  return Number(row.credits);
}

function ledgerFields(m: Movement) {
  return { kind: m.kind, actorUserId: m.actorUserId ?? null, refId: m.refId ?? null, note: m.note ?? null };
}

export type Holder = { institution: string } | { user: string };

/** A balance of a transfer was deleted after the caller checked it (a concurrent delete): nothing moved. */
export class HolderGoneError extends Error {
  override name = 'HolderGoneError';
  constructor(readonly holder: Holder) {
    super(`credit holder ${'institution' in holder ? `institution ${holder.institution}` : `user ${holder.user}`} no longer exists`);
  }
}

/** Moves a balance between two holders in one transaction; undefined (nothing moved) when the source holds too little. */
export async function transferCredits(
  db: DbOrTx,
  from: Holder,
  to: Holder,
  amount: number,
  actorUserId: string,
  /** Runs in the transfer's transaction once both sides moved (an idempotency key saves its response there). */
  inside?: (tx: DbOrTx, moved: { refId: string; from: number; to: number }) => Promise<void>,
): Promise<{ refId: string; from: number; to: number } | undefined> {
  const refId = newId();
  const move = (holder: Holder, delta: number, kind: LedgerKind, tx: DbOrTx) =>
    'institution' in holder ? moveInstitutionCredits(tx, holder.institution, delta, { kind, actorUserId, refId }) : moveUserCredits(tx, holder.user, delta, { kind, actorUserId, refId });
  return db.transaction(async (tx) => {
    // both rows locked, so neither can go now; one deleted since the caller looked at it moves nothing
    const held = await lockHolders(tx, [from, to]);
    for (const holder of [from, to]) if (!held.has('institution' in holder ? holder.institution : holder.user)) throw new HolderGoneError(holder);
    const left = await move(from, -amount, 'transfer_out', tx);
    if (left === undefined) return undefined;
    const arrived = await move(to, amount, 'transfer_in', tx);
    if (arrived === undefined) throw new HolderGoneError(to); // rolls the debit back (not reached: the row is locked)
    const moved = { refId, from: left, to: arrived };
    await inside?.(tx, moved);
    return moved;
  });
}

/**
 * Locks the balances a transaction is about to change (returns the ids of those that exist), in the one order every writer of two balances
 * follows: institutions before users (a Q&A payment from an institution's pool updates the institution,
 * then the asking user's credits_used; an award takes from the institution, then pays the user), each
 * kind by id. A transfer from a user to an institution would otherwise lock them the other way round and
 * deadlock with such a payment on PostgreSQL (one of the two failed by the server).
 */
async function lockHolders(tx: DbOrTx, holders: Holder[]): Promise<Set<string>> {
  const institutionIds = [...new Set(holders.flatMap((h) => ('institution' in h ? [h.institution] : [])))].sort();
  const userIds = [...new Set(holders.flatMap((h) => ('user' in h ? [h.user] : [])))].sort();
  const found = new Set<string>();
  if (institutionIds.length > 0) for (const r of await rowsOf<{ id: string }>(tx, sql`select id from institutions where ${inList(institutions.id, institutionIds)} order by id for update`)) found.add(r.id);
  if (userIds.length > 0) for (const r of await rowsOf<{ id: string }>(tx, sql`select id from users where ${inList(users.id, userIds)} order by id for update`)) found.add(r.id);
  return found;
}

/**
 * Pays an institution's creditAward to a new member, once per (user, institution) ever: the
 * credit_awards primary key is claimed first, then the award moves from the institution's balance to
 * the user's (two `award` ledger rows sharing a refId). Only institutions with poolCredits false and a
 * positive award pay. When the institution cannot cover the award, nothing is paid and nothing is
 * claimed, so a later enrolment (after a top-up) pays it, still once.
 */
export async function payCreditAward(db: DbOrTx, userId: string, institutionId: string): Promise<'paid' | 'none' | 'already' | 'unfunded'> {
  const [inst] = await db
    .select({ amount: institutions.creditAward })
    .from(institutions)
    .where(and(eq(institutions.id, institutionId), eq(institutions.poolCredits, false), gt(institutions.creditAward, 0)))
    .limit(1);
  if (!inst) return 'none';
  const amount = Number(inst.amount);
  try {
    return await db.transaction(async (tx) => {
      const claimed = await tx.insert(creditAwards).values({ userId, institutionId, amount }).onConflictDoNothing().returning({ userId: creditAwards.userId });
      if (claimed.length === 0) return 'already' as const;
      const refId = newId();
      const left = await moveInstitutionCredits(tx, institutionId, -amount, { kind: 'award', refId, note: 'creditAward to a new member' });
      if (left === undefined) tx.rollback();
      await moveUserCredits(tx, userId, amount, { kind: 'award', refId, note: 'creditAward on first enrolment' });
      return 'paid' as const;
    });
  } catch (err) {
    if (err instanceof TransactionRollbackError) return 'unfunded';
    throw err;
  }
}
