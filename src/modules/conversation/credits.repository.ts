import { sql } from 'drizzle-orm';
import { rowsOf, type Db, type DbOrTx } from '../../db/client.js';
import { creditLedger } from '../../db/schema.js';
import { newId } from '../../shared/ids.js';
import { unitsToDecimal } from './pricing.js';

/** Whose balance pays a Q&A request: the institution's pool, or the asking user's own credits. */
export type Payer = { kind: 'institution'; institutionId: string; accountId: string } | { kind: 'user'; userId: string; accountId: string };

const balanceTable = (payer: Payer) => (payer.kind === 'institution' ? sql.raw('institutions') : sql.raw('users'));
const payerId = (payer: Payer) => (payer.kind === 'institution' ? payer.institutionId : payer.userId);
const ledgerOwner = (payer: Payer) => (payer.kind === 'institution' ? { institutionId: payer.institutionId, userId: null } : { userId: payer.userId, institutionId: null });

async function ledger(tx: DbOrTx, payer: Payer, kind: 'reserve' | 'release' | 'charge', units: number, actorUserId: string, refId: string, now: Date) {
  await tx.insert(creditLedger).values({
    id: newId(),
    accountId: payer.accountId,
    ...ledgerOwner(payer),
    delta: unitsToDecimal(units) as unknown as number,
    kind,
    actorUserId,
    refId,
    createdAt: now,
  });
}

/**
 * Reserves `units` from the payer's balance: ONE atomic statement that subtracts only while the
 * balance covers it (`WHERE credits >= $n`), and its `reserve` ledger row, in one transaction.
 * Returns the balance after, or null when the balance does not cover the amount (nothing changed).
 * Concurrent reservations can never overspend: each statement re-checks the row it updates.
 */
export async function reserveCredits(db: Db, payer: Payer, units: number, actorUserId: string, refId: string, now: Date): Promise<number | null> {
  if (units <= 0) return balanceOf(db, payer);
  const amount = unitsToDecimal(units);
  return db.transaction(async (tx) => {
    const rows = await rowsOf<{ credits: string }>(
      tx,
      sql`update ${balanceTable(payer)} set credits = credits - ${amount}::numeric
           where id = ${payerId(payer)} and credits >= ${amount}::numeric
       returning credits`,
    );
    if (rows.length === 0) return null;
    await ledger(tx, payer, 'reserve', -units, actorUserId, refId, now);
    return Number(rows[0]!.credits);
  });
}

export interface Settlement {
  /** The payer's balance after the settlement. */
  balance: number;
  /** The asking user's total credits consumed, after this charge. */
  userCreditsUsed: number;
}

/**
 * Ends a reservation: the whole reservation is released (`release`, +reserved) and the actual cost
 * charged (`charge`, −charged), as ONE atomic balance change (+reserved −charged) with both ledger
 * rows in one transaction, so the ledger of a request always reads reserve −max, release +max,
 * charge −actual. The charge is capped at the reservation (the reservation carries a margin, so this
 * only matters if a provider reports far more input than we counted): credits never go below zero.
 * credits_used grows by the charge on the payer and, when the institution pays, on the asking user.
 */
export async function settleCredits(db: Db, payer: Payer, reservedUnits: number, chargedUnits: number, userId: string, refId: string, now: Date): Promise<Settlement> {
  const charged = Math.max(0, Math.min(chargedUnits, reservedUnits));
  const back = unitsToDecimal(reservedUnits - charged);
  const spent = unitsToDecimal(charged);
  return db.transaction(async (tx) => {
    const rows = await rowsOf<{ credits: string; credits_used: string }>(
      tx,
      sql`update ${balanceTable(payer)} set credits = credits + ${back}::numeric, credits_used = credits_used + ${spent}::numeric
           where id = ${payerId(payer)}
       returning credits, credits_used`,
    );
    if (reservedUnits > 0) await ledger(tx, payer, 'release', reservedUnits, userId, refId, now);
    if (charged > 0) await ledger(tx, payer, 'charge', -charged, userId, refId, now);
    let userCreditsUsed = payer.kind === 'user' ? Number(rows[0]?.credits_used ?? 0) : 0;
    if (payer.kind === 'institution') {
      const used = await rowsOf<{ credits_used: string }>(
        tx,
        sql`update users set credits_used = credits_used + ${spent}::numeric where id = ${userId} returning credits_used`,
      );
      userCreditsUsed = Number(used[0]?.credits_used ?? 0);
    }
    return { balance: Number(rows[0]?.credits ?? 0), userCreditsUsed };
  });
}

/** Gives the whole reservation back (`release`, +reserved): nothing is charged. */
export async function releaseCredits(db: Db, payer: Payer, reservedUnits: number, userId: string, refId: string, now: Date): Promise<number> {
  return (await settleCredits(db, payer, reservedUnits, 0, userId, refId, now)).balance;
}

/** Grows an open reservation by `units` (another model call of the same request), atomically guarded. */
export async function extendReservation(db: Db, payer: Payer, units: number, actorUserId: string, refId: string, now: Date): Promise<boolean> {
  return (await reserveCredits(db, payer, units, actorUserId, refId, now)) !== null;
}

export async function balanceOf(db: DbOrTx, payer: Payer): Promise<number> {
  const rows = await rowsOf<{ credits: string }>(db, sql`select credits from ${balanceTable(payer)} where id = ${payerId(payer)}`);
  return Number(rows[0]?.credits ?? 0);
}
