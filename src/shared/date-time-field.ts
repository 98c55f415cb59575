import { badField } from './errors.js';

/** The years a timestamp may fall in, in UTC: Postgres timestamps and 4-digit ISO 8601 strings both hold 1..9999. */
const MIN_YEAR = 1;
const MAX_YEAR = 9999;

/**
 * A request field the schema's `date-time` format accepted, as a Date. That format lets through what
 * Date cannot hold or Postgres cannot store: a leap second (`23:59:60`, an Invalid Date), an offset
 * without minutes (`+01`), year 0, or a year that becomes 10000 in UTC (`9999-12-31T23:59:59-14:00`).
 * Those are a 400 VALIDATION_FAILED naming `field` (e.g. `daterange.1`), never a 500.
 */
export function dateTimeField(field: string, text: string): Date {
  const date = new Date(text);
  const ms = date.getTime();
  if (Number.isNaN(ms)) throw badField(field, `${field} is not a date-time this service can represent (leap seconds and offsets without minutes are not accepted)`);
  const year = date.getUTCFullYear();
  if (year < MIN_YEAR || year > MAX_YEAR) throw badField(field, `${field} must fall between the years ${MIN_YEAR} and ${MAX_YEAR} (UTC)`);
  return date;
}
