import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';

/**
 * A text as the case-insensitive searches compare it: lower-cased by Postgres, and the final sigma ς folded into σ
 * (Postgres lower-cases Σ to σ always, so "ΟΔΟΣ" and "οδος" differed by their last letter). The trigram indexes of
 * searched names are built on the same expression (migration 0019).
 */
function folded(text: SQLWrapper | SQL): SQL {
  return sql`translate(lower(${text}), 'ς', 'σ')`;
}

/**
 * A LIKE pattern for "contains", with `%`, `_` and `\` of the user's text made literal, folded by Postgres as the
 * column is (`folded(column) like folded(pattern)`): JavaScript's toLowerCase disagrees with it on some letters
 * (the Turkish İ, a final Σ), and a name spelled exactly as stored was not found. The term is in NFC, as stored
 * names are.
 */
export function likeContains(term: string): SQL {
  return folded(sql`${`%${term.normalize('NFC').replace(/[\\%_]/g, (c) => `\\${c}`)}%`}`);
}

/**
 * Case-insensitive "column contains term", literal whatever the term holds. `folded(col) like` rather
 * than ILIKE so that a trigram index on the folded column can serve it.
 */
export function containsInsensitive(column: SQLWrapper, term: string): SQL {
  return sql`${folded(column)} like ${likeContains(term)} escape '\\'`;
}

/** A search term as given, or undefined when it is blank (a blank term is no filter; a non-blank one is matched literally, its spaces included). */
export function searchTerm(term: string | undefined): string | undefined {
  return term?.trim() ? term : undefined;
}

/** `column in (...values)` with each value bound as a parameter; an empty list matches nothing. */
export function inList(column: SQLWrapper, values: readonly string[]): SQL {
  return values.length === 0 ? sql`false` : sql`${column} in (${sql.join(values.map((v) => sql`${v}`), sql`, `)})`;
}

/** A Postgres text[] literal (ids and entity names are passed as one array parameter). */
export function textArray(values: readonly string[]): string {
  return `{${values.map((v) => `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`).join(',')}}`;
}
