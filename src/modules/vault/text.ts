import { searchTerm } from '../../db/search.js';

/**
 * Text of names shown to other people (collection names, file names and titles): Unicode format
 * characters (category Cf: zero-width spaces and joiners, bidi overrides and isolates, the BOM, ...)
 * are removed — they render as nothing, so a name made of them looks blank, and a right-to-left override
 * can make "evil\u202etxt.exe" read as "evilexe.txt" — then surrounding white space is trimmed.
 * The non-blank rule is applied to the result.
 */
export function visibleText(value: string): string {
  return value.normalize('NFC').replace(/\p{Cf}/gu, '').trim();
}

/** Controls (C0, DEL, C1) and the bidi embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069). */
const MARKED = /[\p{Cc}\u202a-\u202e\u2066-\u2069]/gu;

/** What a name's characters become when it is stored (see cleanFileName): NFC, marks made "_", other format characters dropped, white space runs one space. */
function storedCharacters(text: string): string {
  return text
    .normalize('NFC')
    .replace(MARKED, '_')
    .replace(/\p{Cf}/gu, '')
    .replace(/\s+/gu, ' ');
}

/** A file-name search term as stored names are written (cleanFileName), its spaces kept: "a<TAB>b" finds "a_b.txt"; undefined when blank (no filter). */
export function fileNameTerm(term: string | undefined): string | undefined {
  const given = searchTerm(term);
  return given === undefined ? undefined : storedCharacters(given);
}

/** The longest stored file name, in Unicode code points. */
export const MAX_FILE_NAME_CHARS = 255;

/**
 * A file name as stored and shown: Unicode NFC; the last path segment only; every control character
 * and bidi embedding/override/isolate replaced by "_" — a visible trace, so that "evil\u202etxt.exe"
 * (shown as "evilexe.txt") becomes "evil_txt.exe" instead of silently turning into another plausible
 * name; other invisible format characters (zero-width spaces and joiners, LRM/RLM, the BOM) removed;
 * runs of white space made one space; trimmed; at most 255 characters — Unicode code points, as
 * JSON Schema's maxLength and Postgres' char_length count them — cut from the front so that the
 * extension stays, on a code point boundary (a cut by UTF-16 units could keep half a surrogate pair,
 * which the database stores as U+FFFD). A name left with nothing but "_", dots and spaces is no name ("").
 */
export function cleanFileName(name: string): string {
  const base = name.split(/[\\/]/).pop() ?? '';
  const cleaned = storedCharacters(base).trim();
  const kept = lastCodePoints(cleaned, MAX_FILE_NAME_CHARS);
  // nothing left but marks, dots and spaces: no name (the upload is refused for that)
  return /[^\s._]/u.test(kept) ? kept : '';
}

/** The last `max` code points of `s` (never half a surrogate pair), without leading white space. */
function lastCodePoints(s: string, max: number): string {
  if (s.length <= max) return s; // UTF-16 units ≥ code points
  const points = Array.from(s);
  if (points.length <= max) return s;
  return points.slice(points.length - max).join('').trimStart();
}
