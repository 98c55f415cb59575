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
 * exact in float32, and the rounding error (≤ 2^-e/2 ≤ max|xᵢ|·2^-31) is below float32's own for the
 * largest components: the stored vector equals the float32 vector of the text form to within ~1e-9 for
 * unit vectors (test/search-vectors.test.ts).
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

/** A packed vector parameter as a vector, evaluated once per statement (a scalar subquery: an init plan). */
export function vectorParam(packed: PackedVector): SQL {
  return sql`(select ${unpacked(sql`p.a`)} from (select ${packed}::int[] as a) p)`;
}
