import { sql, type SQL } from 'drizzle-orm';

/**
 * How vectors travel to the database: in pgvector's binary form, as a bytes parameter that the wire
 * protocol sends in binary format and pgvector's receive function reads (`$n::vector`): int16 dimensions,
 * int16 0, then each component as a big-endian float32. Nothing is parsed: a vector costs the engine
 * ~10 µs, against ~110 µs for the 384 integers of its text form (a tenth of writing a chunk at ingestion)
 * and ~600 µs for pgvector's text form. The stored components are exactly float32(xᵢ), as pgvector's own
 * text input would give (test/search-vectors.test.ts).
 *
 * node-postgres sends a Buffer parameter in binary format; PGlite does for the types it has a serializer
 * for, which db/binary-params.ts extends to pgvector's (its type id is given when the extension is created).
 */
export type PackedVector = Buffer & { readonly __packed: unique symbol };

/** The binary form of a vector; a wrong length or a non-finite number is refused here, not by the database. */
export function packVector(v: ArrayLike<number>, dimensions: number): PackedVector {
  if (v.length !== dimensions) throw new Error(`embedder returned ${v.length} numbers, expected ${dimensions}`);
  // not from Buffer's shared pool: a parameter sent to the database's worker thread is cloned with its
  // whole ArrayBuffer, which for a pooled Buffer is 8 KB of other data
  const bytes = Buffer.allocUnsafeSlow(4 + 4 * v.length);
  bytes.writeInt16BE(v.length, 0);
  bytes.writeInt16BE(0, 2);
  for (let i = 0; i < v.length; i++) {
    const x = v[i]!;
    // beyond float32's range (~3.4e38) a finite number becomes infinite, which pgvector refuses
    if (!Number.isFinite(Math.fround(x))) throw new Error('embedder returned a non-finite number');
    bytes.writeFloatBE(x, 4 + 4 * i);
  }
  return bytes as PackedVector;
}

/** A vector parameter (a constant of the statement). */
export function vectorParam(packed: PackedVector): SQL {
  return sql`${packed}::vector`;
}
