/**
 * The Snowball English stop words: PostgreSQL's `english.stop`, the list of the `english` text search
 * configuration that the lexical side of search uses. The local embedder leaves them out as they are;
 * other lists (entity extraction, the local answerer) are this list plus their own words.
 */
export const ENGLISH_STOP_WORDS: ReadonlySet<string> = new Set(
  ('i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself it its ' +
    'itself they them their theirs themselves what which who whom this that these those am is are was were be been being ' +
    'have has had having do does did doing a an the and but if or because as until while of at by for with about against ' +
    'between into through during before after above below to from up down in out on off over under again further then ' +
    'once here there when where why how all any both each few more most other some such no nor not only own same so than ' +
    'too very s t can will just don should now').split(' '),
);

/**
 * What a tokenizer that cuts words at apostrophes makes of contractions ("it's" → it, s; "don't" → don, t).
 * In the Snowball list for that reason; a tokenizer that keeps "don't" whole never sees them, and "Don" can be a name.
 */
const CONTRACTION_PARTS: ReadonlySet<string> = new Set(['s', 't', 'don']);

/** The Snowball list without the parts of contractions, plus `extra` (words separated by spaces). */
export function englishStopWordsAnd(extra: string): ReadonlySet<string> {
  return new Set([...[...ENGLISH_STOP_WORDS].filter((w) => !CONTRACTION_PARTS.has(w)), ...extra.split(/\s+/).filter(Boolean)]);
}
