/**
 * Text of names shown to other people (collection names, file names and titles): Unicode format
 * characters (category Cf: zero-width spaces and joiners, bidi overrides and isolates, the BOM, ...)
 * are removed — they render as nothing, so a name made of them looks blank, and a right-to-left override
 * can make "evil\u202etxt.exe" read as "evilexe.txt" — then surrounding white space is trimmed.
 * The non-blank rule is applied to the result.
 */
export function visibleText(value: string): string {
  return value.replace(/\p{Cf}/gu, '').trim();
}
