import { sql } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { newId } from '../../shared/ids.js';
import { unitsToDecimal } from './pricing.js';

/** Whose balance pays a Q&A request: the institution's pool, or the asking user's own credits. */
export type Payer = { kind: 'institution'; institutionId: string; accountId: string } | { kind: 'user'; userId: string; accountId: string };

const balanceTable = (payer: Payer) => (payer.kind === 'institution' ? sql.raw('institutions') : sql.raw('users'));
const payerId = (payer: Payer) => (payer.kind === 'institution' ? payer.institutionId : payer.userId);
const ledgerUser = (payer: Payer) => (payer.kind === 'user' ? payer.userId : null);
const ledgerInstitution = (payer: Payer) => (payer.kind === 'institution' ? payer.institutionId : null);

/** One ledger row as a VALUES tuple (typed, so that the CTE's insert can select from it). */
const ledgerValues = (payer: Payer, kind: 'reserve' | 'release' | 'charge', units: number, actorUserId: string, refId: string, now: Date) =>
  sql`(${newId()}, ${payer.accountId}, ${ledgerUser(payer)}::text, ${ledgerInstitution(payer)}::text, ${unitsToDecimal(units)}::numeric, ${kind}, ${actorUserId}, ${refId}, ${now.toISOString()}::timestamptz)`;

/**
 * Reserves `units` from the payer's balance in ONE atomic statement: the UPDATE subtracts only while
 * the balance covers it (`WHERE credits >= $n`), and the `reserve` ledger row is inserted by the same
 * statement from the UPDATE's result (a data-modifying CTE), so there is no row without the movement
 * and no movement without the row. Returns the balance after, or null when the balance does not cover
 * the amount (nothing changed). Concurrent reservations cannot overspend: each UPDATE re-checks the
 * row it changes under its row lock.
 */
export async function reserveCredits(db: DbOrTx, payer: Payer, units: number, actorUserId: string, refId: string, now: Date): Promise<number | null> {
  if (units <= 0) return balanceOf(db, payer);
  const amount = unitsToDecimal(units);
  const rows = await rowsOf<{ credits: string }>(
    db,
    sql`with moved as (
          update ${balanceTable(payer)} set credits = credits - ${amount}::numeric
           where id = ${payerId(payer)} and credits >= ${amount}::numeric
       returning credits
        ), logged as (
          insert into credit_ledger (id, account_id, user_id, institution_id, delta, kind, actor_user_id, ref_id, created_at)
          select v.* from (values ${ledgerValues(payer, 'reserve', -units, actorUserId, refId, now)}) v, moved
        )
        select credits from moved`,
  );
  return rows.length === 0 ? null : Number(rows[0]!.credits);
}

export interface Settlement {
  /** The payer's balance after the settlement. */
  balance: number;
  /** The asking user's total credits consumed, after this charge. */
  userCreditsUsed: number;
}

/**
 * Ends a reservation in ONE atomic statement: the whole reservation is released (`release`,
 * +reserved) and the actual cost charged (`charge`, −charged) as one balance change (+reserved
 * −charged) with both ledger rows, so the ledger of a request always reads reserve −max, release +max,
 * charge −actual. The charge is capped at the reservation (the reservation carries a margin; the cap
 * only matters if a provider reports far more input than we counted): a balance never goes below
 * zero. credits_used grows by the charge on the payer and, when the institution pays, on the asking
 * user. Pass a transaction to write the history record in the same commit.
 */
export async function settleCredits(db: DbOrTx, payer: Payer, reservedUnits: number, chargedUnits: number, userId: string, refId: string, now: Date): Promise<Settlement> {
  const charged = Math.max(0, Math.min(chargedUnits, reservedUnits));
  const back = unitsToDecimal(reservedUnits - charged);
  const spent = unitsToDecimal(charged);
  const rowsToLog = [
    ...(reservedUnits > 0 ? [ledgerValues(payer, 'release', reservedUnits, userId, refId, now)] : []),
    ...(charged > 0 ? [ledgerValues(payer, 'charge', -charged, userId, refId, now)] : []),
  ];
  const log = rowsToLog.length
    ? sql`, logged as (
          insert into credit_ledger (id, account_id, user_id, institution_id, delta, kind, actor_user_id, ref_id, created_at)
          select v.* from (values ${sql.join(rowsToLog, sql`, `)}) v, moved
        )`
    : sql``;
  // The asking user's own consumption total, when the institution pays (when the user pays, `moved` is that row).
  const used =
    payer.kind === 'institution'
      ? sql`, used as (update users set credits_used = credits_used + ${spent}::numeric where id = ${userId} returning credits_used)`
      : sql``;
  const rows = await rowsOf<{ credits: string; credits_used: string; user_used: string | null }>(
    db,
    sql`with moved as (
          update ${balanceTable(payer)} set credits = credits + ${back}::numeric, credits_used = credits_used + ${spent}::numeric
           where id = ${payerId(payer)}
       returning credits, credits_used
        )${log}${used}
        select moved.credits, moved.credits_used, ${payer.kind === 'institution' ? sql`(select credits_used from used)` : sql`null`} as user_used from moved`,
  );
  const row = rows[0];
  return {
    balance: Number(row?.credits ?? 0),
    userCreditsUsed: Number((payer.kind === 'institution' ? row?.user_used : row?.credits_used) ?? 0),
  };
}

/** Gives the whole reservation back (`release`, +reserved): nothing is charged. */
export async function releaseCredits(db: DbOrTx, payer: Payer, reservedUnits: number, userId: string, refId: string, now: Date): Promise<number> {
  return (await settleCredits(db, payer, reservedUnits, 0, userId, refId, now)).balance;
}

/** Grows an open reservation by `units` (another model call of the same request), with the same guard. */
export async function extendReservation(db: DbOrTx, payer: Payer, units: number, actorUserId: string, refId: string, now: Date): Promise<boolean> {
  return (await reserveCredits(db, payer, units, actorUserId, refId, now)) !== null;
}

export async function balanceOf(db: DbOrTx, payer: Payer): Promise<number> {
  const rows = await rowsOf<{ credits: string }>(db, sql`select credits from ${balanceTable(payer)} where id = ${payerId(payer)}`);
  return Number(rows[0]?.credits ?? 0);
}
