import { sql, type SQL } from 'drizzle-orm';

/**
 * How vectors travel to the database. pgvector's text form (`[0.0123,…]`) makes the embedded engine
 * parse every number with strtof: 384 of them cost ~1 ms a vector, the largest single part of writing a
 * chunk and ~1 ms of every search. Integers parse ~7× faster, and pgvector casts int[] to vector, so a
 * vector is sent as integers with one power-of-two scale:
 *
 *   packed = {e, round(x₁·2^e), …, round(xₙ·2^e)}   and in SQL   vector = ints::vector * (2^-e, …)
 *
 * e is chosen so that the largest |xᵢ|·2^e is at most 2^30 (an int4). Multiplying by a power of two is
 * exact in float32. Two roundings remain, to the integer grid (2^-e/2 < max|xᵢ|·2^-30) and the int →
 * float4 cast: each stored component is float32(xᵢ) or its neighbour (one unit in the last place, when
 * the first rounding crossed a midpoint), plus less than max|xᵢ|·2^-30 for components far below the
 * largest (test/search-vectors.test.ts).
 */
export type PackedVector = string & { readonly __packed: unique symbol };

/** The packed form of a vector; a wrong length or a non-finite number is refused here, not by the cast. */
export function packVector(v: ArrayLike<number>, dimensions: number): PackedVector {
  if (v.length !== dimensions) throw new Error(`embedder returned ${v.length} numbers, expected ${dimensions}`);
  let max = 0;
  for (let i = 0; i < v.length; i++) {
    const x = v[i]!;
    if (!Number.isFinite(x)) throw new Error('embedder returned a non-finite number');
    const a = Math.abs(x);
    if (a > max) max = a;
  }
  // a zero vector stays zero (its cosine with anything is NaN, and searches leave it out)
  const e = max === 0 ? 0 : Math.max(-126, Math.min(126, 30 - Math.ceil(Math.log2(max))));
  const scale = 2 ** e;
  const parts = new Array<string>(v.length + 1);
  parts[0] = String(e);
  for (let i = 0; i < v.length; i++) {
    // Math.round(-0.4) is -0, which String() writes as "0"
    parts[i + 1] = String(Math.round(v[i]! * scale));
  }
  return `{${parts.join(',')}}` as PackedVector;
}

/** The vector of a packed column or expression of type int[] (referenced three times: give a column, not a parameter). */
export function unpacked(packedInts: SQL): SQL {
  return sql`(${packedInts}[2:]::vector * array_fill(power(2::float8, -${packedInts}[1])::real, array[cardinality(${packedInts}) - 1])::vector)`;
}

/**
 * Batch writers: a packed vector as three columns, its exponent, its integers (an int[] literal) and their
 * count. `batchScales` and `scaledColumns` make them vectors again with one scale vector per distinct
 * exponent and length in the batch instead of one array_fill per row (a third of a staged vector's cost).
 */
export function packedColumns(p: PackedVector): [e: string, ints: string, n: string] {
  const cut = p.indexOf(',');
  let n = 0;
  for (let i = cut; i < p.length; i++) if (p.charCodeAt(i) === 44) n++;
  return [p.slice(1, cut), `{${p.slice(cut + 1)}`, String(n)];
}

/** The scale vectors of the distinct (e, n) of a batch's rows (columns e, n of `rows`, as packedColumns), as rows (e, n, s). */
export function batchScales(rows: SQL): SQL {
  return sql`select d.e, d.n, array_fill(power(2::float8, -d.e)::real, array[d.n])::vector as s from (select distinct r.e::int as e, r.n::int as n from ${rows} r) d`;
}

/** The vector of a row with packedColumns (alias `row`), joined to batchScales (alias `scale`) on scaledJoin. */
export function scaledColumns(row: string, scale: string): SQL {
  return sql`(${sql.raw(row)}.ints::int[]::vector * ${sql.raw(scale)}.s)`;
}

/** The join condition of a row with packedColumns and its scale vector. */
export function scaledJoin(row: string, scale: string): SQL {
  return sql`${sql.raw(scale)}.e = ${sql.raw(row)}.e::int and ${sql.raw(scale)}.n = ${sql.raw(row)}.n::int`;
}

/** A packed vector parameter as a vector, evaluated once per statement (a scalar subquery: an init plan). */
export function vectorParam(packed: PackedVector): SQL {
  return sql`(select ${unpacked(sql`p.a`)} from (select ${packed}::int[] as a) p)`;
}
