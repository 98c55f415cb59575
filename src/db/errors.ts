/**
 * The SQLSTATE of a database error, wherever the driver put it: on the error itself (pg, PGlite) or on
 * a wrapper's `cause` (drizzle wraps failed queries), a few levels deep. Five digits or capitals; Node's
 * own error codes (EPIPE, EBUSY, …) start with E, which no SQLSTATE class does.
 */
export function sqlState(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^(?!E)[0-9A-Z]{5}$/.test(code)) return code;
  }
  return undefined;
}

/** A unique index refused the row (23505). */
export const isUniqueViolation = (err: unknown): boolean => sqlState(err) === '23505';

/**
 * A row this statement refers to is gone (23503, foreign key violation): a record the request named was
 * deleted by another request after this one had checked it (an institution deleted while an answer was
 * being generated). Routes check what they are given first, so input alone does not reach this.
 */
export const isForeignKeyViolation = (err: unknown): boolean => sqlState(err) === '23503';

/** A lock not obtained within lock_timeout (55P03), or a deadlock PostgreSQL broke by aborting this transaction (40P01). */
export const isLockConflict = (err: unknown): boolean => {
  const code = sqlState(err);
  return code === '55P03' || code === '40P01';
};

/**
 * Runs `run` (a transaction) again while it fails on a lock conflict (55P03, 40P01): up to `attempts`
 * times, waiting a little longer each time (with jitter, so that two waiting writers do not meet again).
 */
export async function retryOnLockConflict<T>(run: () => Promise<T>, options: { attempts?: number; log?: { info(obj: object, msg?: string): void } } = {}): Promise<T> {
  const attempts = options.attempts ?? 20;
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      if (!isLockConflict(err) || attempt >= attempts) throw err;
      options.log?.info({ attempt, code: sqlState(err) }, 'a lock is held by another transaction; trying again');
      await new Promise((resolve) => setTimeout(resolve, Math.min(2000, 50 * 2 ** attempt) * (0.5 + Math.random() / 2)));
    }
  }
}
