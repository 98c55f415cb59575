import { sql, type SQL } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { newId } from '../../shared/ids.js';
import { decimalToUnits, unitsToDecimal } from './pricing.js';

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
  if (units <= 0) {
    // Nothing to hold (a model priced 0), but the reservation is opened all the same, empty: what the request turns
    // out to cost (a provider answering with a priced model) is charged by its settlement, which only an open
    // reservation lets move the balance. No balance change, no ledger row.
    const [row] = await rowsOf<{ credits: string | null }>(
      db,
      sql`with opened as (
            insert into credit_reservations (ref_id, account_id, user_id, institution_id, actor_user_id, amount, created_at, updated_at)
            values (${refId}, ${payer.accountId}, ${ledgerUser(payer)}::text, ${ledgerInstitution(payer)}::text, ${actorUserId}, 0,
                    ${now.toISOString()}::timestamptz, ${now.toISOString()}::timestamptz)
            on conflict (ref_id) do nothing
          )
          select (select credits from ${balanceTable(payer)} where id = ${payerId(payer)}) as credits`,
    );
    return Number(row?.credits ?? 0);
  }
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
        ), opened as (
          insert into credit_reservations (ref_id, account_id, user_id, institution_id, actor_user_id, amount, created_at, updated_at)
          select ${refId}, ${payer.accountId}, ${ledgerUser(payer)}::text, ${ledgerInstitution(payer)}::text, ${actorUserId}, ${amount}::numeric,
                 ${now.toISOString()}::timestamptz, ${now.toISOString()}::timestamptz
            from moved
          on conflict (ref_id) do update set amount = credit_reservations.amount + excluded.amount, updated_at = excluded.updated_at
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
  /** What was charged (units): the actual cost, or as much of it as the balance covered. */
  chargedUnits: number;
}

/**
 * Ends a reservation in ONE atomic statement: the open reservation row is deleted, and what it holds is
 * released whole (`release`, +reserved) and the actual cost charged (`charge`, −charged) as one balance
 * change (+reserved −charged) with both ledger rows, so the ledger of a request always reads reserve −max,
 * release +max, charge −actual. The amounts come from the deleted row, not from the caller: a reservation
 * closed meanwhile (the sweep) moves nothing, and one that changed meanwhile is released as it stands. The
 * actual cost is charged even beyond the reservation (a provider that reports more input than we counted,
 * or more output than it was allowed), from the rest of the balance, which is locked first and never goes
 * below zero: a cost the balance cannot cover is charged as far as it goes (`chargedUnits` says how far).
 * credits_used grows by the charge on the payer and, when the institution pays, on the asking user.
 * `reservedUnits` is what the caller reserved: a reservation no longer open is a ReservationClosedError, except for 0
 * (an empty reservation, which the sweep may have closed with nothing in it): then nothing moves and the balances are read. Pass a transaction to write the history record
 * in the same commit.
 */
export async function settleCredits(db: DbOrTx, payer: Payer, reservedUnits: number, chargedUnits: number, userId: string, refId: string, now: Date): Promise<Settlement> {
  const wanted = unitsToDecimal(Math.max(0, chargedUnits));
  const ledgerRow = (kind: 'release' | 'charge', delta: SQL) =>
    sql`select ${newId()}, ${payer.accountId}, ${ledgerUser(payer)}::text, ${ledgerInstitution(payer)}::text, ${delta}, ${kind}, ${userId}, ${refId}, ${now.toISOString()}::timestamptz from c, moved`;
  // The asking user's own consumption total, when the institution pays (when the user pays, `moved` is that row).
  const used =
    payer.kind === 'institution'
      ? sql`, used as (update users set credits_used = credits_used + (select charged from c) where id = ${userId} and exists (select 1 from moved) returning credits_used)`
      : sql``;
  // Only the statement that deletes the open reservation moves the balance, so a reservation is settled
  // once however many try (a sweep, a retry).
  const rows = await rowsOf<{ credits: string; credits_used: string; user_used: string | null; charged: string }>(
    db,
    sql`with closed as (
          delete from credit_reservations where ref_id = ${refId} returning amount
        ), payer as (
          select credits from ${balanceTable(payer)} where id = ${payerId(payer)} and exists (select 1 from closed) for update
        ), c as (
          select amount as reserved, least(${wanted}::numeric, amount + coalesce((select credits from payer), 0)) as charged from closed
        ), moved as (
          update ${balanceTable(payer)} set credits = credits + (select reserved - charged from c), credits_used = credits_used + (select charged from c)
           where id = ${payerId(payer)} and exists (select 1 from c)
       returning credits, credits_used
        ), logged as (
          insert into credit_ledger (id, account_id, user_id, institution_id, delta, kind, actor_user_id, ref_id, created_at)
          ${ledgerRow('release', sql`c.reserved`)} where c.reserved > 0
          union all ${ledgerRow('charge', sql`-c.charged`)} where c.charged > 0
        )${used}
        select moved.credits, moved.credits_used, ${payer.kind === 'institution' ? sql`(select credits_used from used)` : sql`null`} as user_used, (select charged from c) as charged from moved`,
  );
  const row = rows[0];
  if (row) {
    return {
      balance: Number(row.credits),
      userCreditsUsed: Number((payer.kind === 'institution' ? row.user_used : row.credits_used) ?? 0),
      chargedUnits: decimalToUnits(String(row.charged)),
    };
  }
  if (reservedUnits > 0) throw new ReservationClosedError(refId);
  // an empty reservation closed meanwhile: nothing moves, the balances are as they are
  const [user] = await rowsOf<{ credits_used: string }>(db, sql`select credits_used from users where id = ${userId}`);
  return { balance: await balanceOf(db, payer), userCreditsUsed: Number(user?.credits_used ?? 0), chargedUnits: 0 };
}

/** Gives the whole reservation back (`release`, +reserved): nothing is charged. */
export async function releaseCredits(db: DbOrTx, payer: Payer, reservedUnits: number, userId: string, refId: string, now: Date): Promise<number> {
  return (await settleCredits(db, payer, reservedUnits, 0, userId, refId, now)).balance;
}

/**
 * Grows an open reservation by `units` (another model call of the same request) in ONE statement: the
 * reservation row is locked first, and the balance moves (with the same guard and ledger row as a
 * reservation) and the row grows only if it is still open. False when the balance does not cover it or
 * the reservation was closed meanwhile (the sweep): nothing changed.
 */
export async function extendReservation(db: DbOrTx, payer: Payer, units: number, actorUserId: string, refId: string, now: Date): Promise<boolean> {
  if (units <= 0) return true;
  const amount = unitsToDecimal(units);
  const rows = await rowsOf<{ credits: string }>(
    db,
    sql`with open as (
          select ref_id from credit_reservations where ref_id = ${refId} for update
        ), moved as (
          update ${balanceTable(payer)} set credits = credits - ${amount}::numeric
           where id = ${payerId(payer)} and credits >= ${amount}::numeric and exists (select 1 from open)
       returning credits
        ), logged as (
          insert into credit_ledger (id, account_id, user_id, institution_id, delta, kind, actor_user_id, ref_id, created_at)
          select v.* from (values ${ledgerValues(payer, 'reserve', -units, actorUserId, refId, now)}) v, moved
        ), grown as (
          update credit_reservations set amount = amount + ${amount}::numeric, updated_at = ${now.toISOString()}::timestamptz
           where ref_id = ${refId} and exists (select 1 from moved)
        )
        select credits from moved`,
  );
  return rows.length > 0;
}

/** A settlement found no open reservation: it was settled already (a sweep after the request outlived it), or its payer is gone. */
export class ReservationClosedError extends Error {
  override name = 'ReservationClosedError';
  constructor(readonly refId: string) {
    super(`credit reservation ${refId} is not open`);
  }
}

type ReservationRow = { ref_id: string; account_id: string; user_id: string | null; institution_id: string | null; actor_user_id: string; amount: string };

const reservationColumns = sql`ref_id, account_id, user_id, institution_id, actor_user_id, amount::text as amount`;

/** Releases one open reservation whole through settleCredits (a release ledger row); false when it was closed meanwhile. */
async function releaseRow(db: DbOrTx, r: ReservationRow, now: Date): Promise<boolean> {
  const payer: Payer = r.institution_id
    ? { kind: 'institution', institutionId: r.institution_id, accountId: r.account_id }
    : { kind: 'user', userId: r.user_id!, accountId: r.account_id };
  try {
    await settleCredits(db, payer, decimalToUnits(r.amount), 0, r.actor_user_id, r.ref_id, now);
    return true;
  } catch (err) {
    if (err instanceof ReservationClosedError) return false;
    throw err;
  }
}

/**
 * Releases whole every reservation not renewed since `before` (its request ended without settling it:
 * the process died during the answer), at most `limit`, through settleCredits (a release ledger row each;
 * one that a request settles meanwhile is passed over). Returns, one entry per reservation released, the user whose
 * request reserved it (whose cached user row GET /api/user/me shows; a personal balance is always the asker's own).
 */
export async function releaseStaleReservations(db: DbOrTx, before: Date, now: Date, limit = 100): Promise<string[]> {
  const stale = await rowsOf<ReservationRow>(
    db,
    sql`select ${reservationColumns} from credit_reservations
         where updated_at < ${before.toISOString()}::timestamptz order by updated_at limit ${limit}`,
  );
  const released: string[] = [];
  for (const r of stale) if (await releaseRow(db, r, now)) released.push(r.actor_user_id);
  return released;
}

/**
 * Releases whole the open reservation `refId` of a request of `actorUserId`, as the sweep does (settleCredits: a
 * release ledger row, once however many try), when its request is known to be dead: a retry of the same user took
 * over its idempotency claim. Pass the takeover's transaction, so that both commit together. True when it released
 * one; false when none of that user's is open (never made, or settled already).
 */
export async function releaseReservation(db: DbOrTx, refId: string, actorUserId: string, now: Date): Promise<boolean> {
  const [r] = await rowsOf<ReservationRow>(db, sql`select ${reservationColumns} from credit_reservations where ref_id = ${refId} and actor_user_id = ${actorUserId}`);
  return r !== undefined && (await releaseRow(db, r, now));
}

/** Whether the payer's balance still exists (its institution or user was not deleted). */
export async function payerExists(db: DbOrTx, payer: Payer): Promise<boolean> {
  return (await rowsOf(db, sql`select 1 from ${balanceTable(payer)} where id = ${payerId(payer)}`)).length > 0;
}

export async function balanceOf(db: DbOrTx, payer: Payer): Promise<number> {
  const rows = await rowsOf<{ credits: string }>(db, sql`select credits from ${balanceTable(payer)} where id = ${payerId(payer)}`);
  return Number(rows[0]?.credits ?? 0);
}
