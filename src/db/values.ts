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

/**
 * Names and e-mails are stored in NFC, the form search terms are put in (search.ts likeContains) and login
 * looks e-mails up in: a name sent decomposed (e + U+0301, as macOS and many copy-pastes write é) is then
 * found by its exact text, a substring of it or its composed spelling, and two e-mails that differ only
 * by that form are one e-mail (the unique index on lower(email) sees the same text).
 */
export function nfc<T extends string | null | undefined>(value: T): T {
  return (typeof value === 'string' ? value.normalize('NFC') : value) as T;
}

/** The row with the given text columns in NFC (those absent or null left as they are). */
export function withNfc<R extends object>(row: R, keys: ReadonlyArray<keyof R>): R {
  const out = { ...row };
  for (const key of keys) if (typeof out[key] === 'string') out[key] = nfc(out[key] as string) as R[keyof R];
  return out;
}
