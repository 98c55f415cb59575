/**
 * fast-check arbitraries generated from a route's own JSON schema (TypeBox output), valid and
 * mutated: the fuzzer (test/fuzz.test.ts) sends what they produce.
 *
 * `validValue(schema)` follows the schema (types, enums, bounds, formats, required keys), with small
 * sizes. `hostileValue(schema)` is the same shape where any node may be replaced by something hostile:
 * another type, a huge string, deep nesting, unicode (lone surrogates, NUL, bidi controls), null,
 * prototype keys, huge arrays, numbers out of range.
 */
import fc from 'fast-check';

export type JsonSchema = {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  maxItems?: number;
  minItems?: number;
  format?: string;
  pattern?: string;
  [key: string]: unknown;
};

const UUID_RE = /^\^\[0-9a-f\]\{8\}/;

export interface ArbitraryOptions {
  /** Real ids to use sometimes where a uuid is expected (so that requests reach past the lookup). */
  ids: readonly string[];
}

const weird = [
  '\u0000',
  'a\u0000b',
  '\ud800',
  'x\udfffy',
  '\ud83d',
  '\u202eevil.txt',
  '\u200b\u200d\ufeff',
  '\uffff\ufffe',
  'ｆｕｌｌｗｉｄｔｈ',
  'e\u0301\u0301\u0301',
  '😀'.repeat(50),
  '%00',
  '%',
  '../../etc/passwd',
  '<script>alert(1)</script>',
  "'; drop table users; --",
  '\\',
  '"',
  '{"a":1}',
  '(a+)+$',
  '.*'.repeat(30),
  ' ',
  '',
  'null',
  'true',
  '-1',
  '1e309',
  'NaN',
  '__proto__',
  'constructor',
];

/** Short hostile strings: control, format and surrogate characters, injections, numbers as text. */
export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(...weird), weight: 6 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 40 }), weight: 3 },
  { arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }), weight: 2 },
  { arbitrary: fc.constantFrom(300, 1_000, 5_000).map((n) => 'x'.repeat(n)), weight: 1 },
);

/** Big strings (up to 1.5 MB of text; the body limit is 2 MB). */
export const hugeString: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(10_000, 100_000, 600_000).map((n) => 'x'.repeat(n)),
  fc.constantFrom(5_000, 50_000).map((n) => '\u0000\ud800é'.repeat(n)),
  fc.constantFrom(20_000, 200_000).map((n) => '\u202e😀'.repeat(n)),
);

const hostileNumber: fc.Arbitrary<number> = fc.oneof(
  fc.constantFrom(-0, 1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, -(2 ** 63), 2 ** 31, -(2 ** 31) - 1, 1e-320, 0.1 + 0.2, 1e21, 4.9e-324),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.integer(),
);

/** Nested arrays or objects, `depth` levels deep (JSON.stringify handles a few thousand). */
export const deepNesting: fc.Arbitrary<unknown> = fc
  .tuple(fc.constantFrom(10, 100, 1_000, 3_000), fc.boolean())
  .map(([depth, asObject]) => {
    let v: unknown = 'leaf';
    for (let i = 0; i < depth; i++) v = asObject ? { a: v } : [v];
    return v;
  });

/** An object with own prototype keys (the JSON text then contains "__proto__" / "constructor"). */
export const prototypeKeys: fc.Arbitrary<Record<string, unknown>> = fc.constantFrom(
  () => JSON.parse('{"__proto__": {"isAdmin": true, "role": "superadmin"}}'),
  () => JSON.parse('{"constructor": {"prototype": {"role": "superadmin"}}}'),
  () => JSON.parse('{"a": {"__proto__": {"polluted": 1}}}'),
  () => ({ hasOwnProperty: 'x', toString: 1, valueOf: null }),
).map((make) => make() as Record<string, unknown>);

/** Small hostile values of any type (used at any node of a shaped value). */
export const hostileAny: fc.Arbitrary<unknown> = fc.oneof(
  { arbitrary: hostileString, weight: 5 },
  { arbitrary: hostileNumber, weight: 3 },
  { arbitrary: fc.constantFrom(null, true, false, [], {}, [null], ['']), weight: 3 },
  { arbitrary: prototypeKeys, weight: 2 },
  { arbitrary: fc.jsonValue({ maxDepth: 3 }), weight: 2 },
);

/** Big values: huge strings, huge arrays, deep nesting (rare in a run: each costs milliseconds). */
export const hugeValue: fc.Arbitrary<unknown> = fc.oneof(
  hugeString,
  deepNesting,
  fc.constantFrom(1_000, 100_000).map((n) => Array.from({ length: n }, (_, i) => i % 7)),
  fc.constantFrom(10_000, 60_000).map((n) => Array.from({ length: n }, () => 'abc')),
  fc.constantFrom(20_000).map((n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i]))),
);

/** A shaped value with one field (an existing one, or a new one) replaced by a huge value. */
export function withHugeField(schema: JsonSchema, o: ArbitraryOptions): fc.Arbitrary<unknown> {
  const keys = Object.keys(schema.properties ?? {});
  return fc
    .tuple(validValue(schema, o), fc.constantFrom(...(keys.length ? keys : ['x'])), hugeValue)
    .map(([base, key, huge]) => (base && typeof base === 'object' && !Array.isArray(base) ? { ...base, [key]: huge } : huge));
}

/** Merges own keys with defineProperty, so that a "__proto__" key stays an own key (Object.assign would set the prototype). */
function ownMerge(...sources: object[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const src of sources) {
    for (const key of Object.keys(src)) Object.defineProperty(out, key, { value: (src as Record<string, unknown>)[key], enumerable: true, writable: true, configurable: true });
  }
  return out;
}

function typesOf(schema: JsonSchema): string[] {
  if (Array.isArray(schema.type)) return schema.type;
  if (typeof schema.type === 'string') return [schema.type];
  return [];
}

export function validValue(schema: JsonSchema, o: ArbitraryOptions, depth = 0): fc.Arbitrary<unknown> {
  if (depth > 6) return fc.constant(null);
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum);
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives && alternatives.length > 0) return fc.oneof(...alternatives.map((s) => validValue(s, o, depth + 1)));
  const types = typesOf(schema);
  if (types.length > 1) return fc.oneof(...types.map((t) => validValue({ ...schema, type: t }, o, depth)));
  switch (types[0]) {
    case 'string': {
      if (schema.format === 'uuid' || (schema.pattern && UUID_RE.test(schema.pattern))) {
        return o.ids.length > 0 ? fc.oneof(fc.constantFrom(...o.ids), fc.uuid({ version: 7 })) : fc.uuid({ version: 7 });
      }
      if (schema.format === 'email') return fc.emailAddress().filter((e) => e.length <= (schema.maxLength ?? 254));
      if (schema.format === 'date-time') return fc.date({ min: new Date(0), max: new Date(4e12), noInvalidDate: true }).map((d) => d.toISOString());
      if (schema.format === 'binary') return fc.string({ maxLength: 20 });
      if (schema.pattern) {
        try {
          return fc.stringMatching(new RegExp(schema.pattern)).filter((s) => s.length <= (schema.maxLength ?? 1e6));
        } catch {
          return fc.string();
        }
      }
      const minLength = schema.minLength ?? 0;
      const maxLength = Math.min(schema.maxLength ?? 5000, 5000);
      // Within the schema, at its edges: the longest string in 1-, 2- and 4-byte characters, blank and invisible text.
      const edges = [
        'x'.repeat(maxLength),
        'é'.repeat(maxLength),
        '😀'.repeat(maxLength),
        ' '.repeat(Math.max(minLength, 1)),
        '\u200b'.repeat(Math.max(minLength, 1)),
        '\u202e'.repeat(Math.max(minLength, 1)),
      ].filter((e) => [...e].length >= minLength && [...e].length <= maxLength);
      return fc.oneof(
        { arbitrary: fc.string({ minLength, maxLength: Math.max(minLength, Math.min(maxLength, 30)) }), weight: 4 },
        { arbitrary: fc.string({ unit: 'grapheme', minLength, maxLength: Math.max(minLength, Math.min(maxLength, 30)) }), weight: 1 },
        ...(edges.length ? [{ arbitrary: fc.constantFrom(...edges), weight: 1 }] : []),
      );
    }
    case 'integer': {
      const min = Math.max(schema.minimum ?? -1e6, -1e9);
      const max = Math.min(schema.maximum ?? 1e6, 1e9);
      return fc.oneof({ arbitrary: fc.integer({ min, max }), weight: 3 }, { arbitrary: fc.constantFrom(min, max, ...[0, 1].filter((v) => v >= min && v <= max)), weight: 1 });
    }
    case 'number': {
      const min = Math.max(schema.minimum ?? -1e6, -1e12);
      const max = Math.min(schema.maximum ?? 1e6, 1e12);
      const edges = [min, max, 0, -0, 0.0001, 0.00005, 1e-7, max - 0.0001, 0.1 + 0.2].filter((v) => v >= min && v <= max);
      return fc.oneof({ arbitrary: fc.double({ min, max, noNaN: true, noDefaultInfinity: true }), weight: 3 }, { arbitrary: fc.constantFrom(...edges), weight: 1 });
    }
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array':
      return fc.array(validValue(schema.items ?? {}, o, depth + 1), { minLength: schema.minItems ?? 0, maxLength: Math.min(schema.maxItems ?? 4, 4) });
    case 'object': {
      const props = schema.properties ?? {};
      const model: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [k, s] of Object.entries(props)) model[k] = validValue(s, o, depth + 1);
      return fc.record(model, { requiredKeys: (schema.required ?? []).filter((k) => k in props) });
    }
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

/** Like validValue, but any node (the root included) may be hostile, and objects may carry prototype or unknown keys. */
export function hostileValue(schema: JsonSchema, o: ArbitraryOptions, depth = 0): fc.Arbitrary<unknown> {
  const shaped = (() => {
    const types = typesOf(schema);
    if (depth < 6 && types[0] === 'object' && schema.properties) {
      const model: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [k, s] of Object.entries(schema.properties)) model[k] = hostileValue(s, o, depth + 1);
      return fc
        .tuple(
          fc.record(model, { requiredKeys: [] }),
          fc.option(prototypeKeys, { freq: 8 }),
          fc.option(fc.dictionary(fc.string({ maxLength: 8 }), hostileAny, { maxKeys: 3 }), { freq: 6 }),
        )
        .map(([base, proto, extra]) => ownMerge(extra ?? {}, proto ?? {}, base));
    }
    if (depth < 6 && types[0] === 'array') {
      return fc.array(hostileValue(schema.items ?? {}, o, depth + 1), { maxLength: 6 });
    }
    return validValue(schema, o, depth);
  })();
  return fc.oneof({ arbitrary: shaped, weight: 6 }, { arbitrary: hostileAny, weight: 1 });
}
