import { types, type PGlite } from '@electric-sql/pglite';

type Parser = (value: string, typeId?: number) => unknown;
type Parsers = Record<number, Parser>;

/**
 * The types drizzle's PGlite driver reads as raw text: it passes an identity parser for each of them with every
 * statement (drizzle-orm/pglite/session.js): timestamp, timestamptz, interval, date, and the arrays numeric[],
 * timestamp[], timestamptz[], interval[], date[].
 */
export const DRIZZLE_RAW_TYPES: readonly number[] = [1114, 1184, 1186, 1082, 1231, 1115, 1185, 1187, 1182];

/** The arrays among them whose elements are among them too, by array type: their element type (numeric[]'s, numeric, is not). */
const ELEMENT_OF: Readonly<Record<number, number>> = { 1115: 1114, 1185: 1184, 1187: 1186, 1182: 1082 };

const identity = (value: string) => value;

/**
 * PGlite merges the parsers a statement passes into a copy of its whole parser table, on every statement that
 * passes any: with an array type for every type it knows, that table has ~320 entries, and the copy cost ~38 µs
 * and ~140 KB of garbage per statement (`select 1` on this machine: 178 µs with drizzle's parsers, 140 µs without;
 * bench/RESULTS.md). Every statement drizzle sends passes them.
 *
 * Here the instance itself reads drizzle's raw types as raw text, and a statement passes parsers only when it
 * asks for something else: `parsersFor` gives, for the raw types a statement's caller asked for, the parsers to
 * pass with it (undefined: none, the instance's own are those). A caller that asks for none, or for another
 * set, gets PGlite's own parsing of the types it did not ask for, as before: the result is the same.
 */
export class RawTypes {
  /** PGlite's parsers of the raw types, as they were before the instance was changed */
  private readonly defaults: Parsers = {};

  constructor(pg: PGlite) {
    for (const oid of DRIZZLE_RAW_TYPES) this.defaults[oid] = pg.parsers[oid] ?? identity;
    // PGlite's parser of an array type reads its element type's parser from the instance when it parses: an
    // array whose element type turns raw here gets an array parser of its own, over the element's old parser
    for (const [array, element] of Object.entries(ELEMENT_OF)) {
      const parseElement = this.defaults[element]!;
      this.defaults[Number(array)] = (value: string) => types.arrayParser(value, (x: string) => parseElement(x, element), Number(array));
    }
    for (const oid of DRIZZLE_RAW_TYPES) pg.parsers[oid] = identity;
    Object.freeze(this.defaults);
  }

  /** The parsers to pass with a statement whose caller reads `rawTypes` as raw text (undefined: none needed). */
  parsersFor(rawTypes: readonly number[] | undefined): Parsers | undefined {
    if (rawTypes && rawTypes.length === DRIZZLE_RAW_TYPES.length && DRIZZLE_RAW_TYPES.every((oid) => rawTypes.includes(oid))) return undefined;
    // PGlite merges what is passed into a copy of its table (it never changes the object passed)
    if (!rawTypes || rawTypes.length === 0) return this.defaults;
    const parsers: Parsers = { ...this.defaults };
    for (const oid of rawTypes) parsers[oid] = identity;
    return parsers;
  }
}
