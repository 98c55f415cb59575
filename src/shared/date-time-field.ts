import { badField } from './errors.js';

/**
 * The instants the service takes from requests: years 1 to 9999 in UTC, what Postgres timestamps and
 * four-digit ISO 8601 strings both hold. Beyond them JavaScript writes expanded years (`+010000-…`),
 * which the database refuses.
 */
export const MIN_EPOCH_MS = Date.parse('0001-01-01T00:00:00.000Z');
export const MAX_EPOCH_MS = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * A request field the schema's `date-time` format accepted, as a Date. That format lets through what
 * Date cannot hold or Postgres cannot store: a leap second (`23:59:60`, an Invalid Date), an offset
 * without minutes (`+01`), year 0, or a year that becomes 10000 in UTC (`9999-12-31T23:59:59-14:00`).
 * Those are a 400 VALIDATION_FAILED naming `field` (e.g. `daterange.1`), never a 500.
 */
export function dateTimeField(field: string, text: string): Date {
  const ms = Date.parse(text);
  if (Number.isNaN(ms)) throw badField(field, `${field} is not a date-time this service can represent (leap seconds and offsets without minutes are not accepted)`);
  if (ms < MIN_EPOCH_MS || ms > MAX_EPOCH_MS) throw badField(field, `${field} must fall between the years 1 and 9999 (UTC)`);
  return new Date(ms);
}
