import type { PGlite } from '@electric-sql/pglite';

/**
 * PGlite sends a parameter in the wire protocol's binary format when its serializer returns bytes, and
 * has serializers only for the built-in types: for any other type (pgvector's `vector`, whose type id is
 * given when the extension is created) it sends `String(value)`, so bytes would arrive as "1,2,3,…". Here
 * a parameter of such a type that is bytes goes as it is, in binary format, read by the type's receive
 * function (search/vectors.ts sends vectors so); anything else is still sent as its text. node-postgres
 * already sends a Buffer in binary format.
 */
export function sendBytesAsBinary(pg: PGlite): void {
  const bytesOrText = (value: unknown) => (ArrayBuffer.isView(value) ? value : String(value));
  pg.serializers = new Proxy(pg.serializers, {
    get: (known, type) => (Reflect.get(known, type) as unknown) ?? (typeof type === 'string' && /^\d+$/.test(type) ? bytesOrText : undefined),
  });
}
