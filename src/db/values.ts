/**
 * Values of raw SQL rows: node-postgres parses timestamptz into a Date, PGlite's raw results may hand
 * back the text form. One conversion for both.
 */
export function toDate(value: Date | string): Date;
export function toDate(value: Date | string | null): Date | null;
export function toDate(value: Date | string | null): Date | null {
  if (value === null) return null;
  return value instanceof Date ? value : new Date(value);
}
