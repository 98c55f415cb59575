/**
 * Text written to the database that comes from somewhere else (an exception's message, a parser's error
 * that quotes the file): Postgres refuses a NUL in a text value, and a driver's error message repeats
 * the statement's parameters, so an unfiltered message can make the very write that records a failure
 * fail too. C0 control characters other than tab and newline are removed, lone surrogates become
 * U+FFFD (what the driver would store), and the length is capped (at most `max` UTF-16 units, hence at
 * most `max` characters), never inside a surrogate pair.
 */
export const MAX_STORED_MESSAGE_CHARS = 1000;

const C0_EXCEPT_TAB_NEWLINE = /[\u0000-\u0008\u000b-\u001f]/g;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

export function storableText(message: string, max = MAX_STORED_MESSAGE_CHARS): string {
  const clean = message.replace(C0_EXCEPT_TAB_NEWLINE, '').replace(LONE_SURROGATE, '\ufffd');
  if (clean.length <= max) return clean;
  let cut = clean.slice(0, Math.max(0, max - 1));
  if (/[\ud800-\udbff]$/.test(cut)) cut = cut.slice(0, -1);
  return `${cut}…`;
}
