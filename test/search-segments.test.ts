import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { sql } from 'drizzle-orm';
import { rowsOf, type Database } from '../src/db/client.js';
import { writeIndexedChunks, writeUploadGraph } from '../src/modules/search/indexing.js';
import { compareCodePoints, edgeLists, entityRows, graphNames, uploadGraph, type EntityKind, type Mention, type UploadGraph } from '../src/modules/search/graph.js';
import { denseSearch, drainStagedVectors, refreshUploadIndex, replaceChunkText } from '../src/modules/search/search.repository.js';
import { textArray } from '../src/db/search.js';
import { BM25, bm25Params } from '../src/modules/search/retrieve.js';
import { allowedOf, bm25, entityScores, expandNeighbours, hashKey, hashKey2, keyTable, lookup, feedbackTerms, forEachLexeme, matching, NamePositions, neighbours, parseTsQuery, SegmentCache, TermPositions, TopK, type Allowed } from '../src/modules/search/segments.js';
import { bySimilarity, similarity, TrigramDictionary, trigrams } from '../src/modules/search/trigrams.js';
import { insertUpload } from '../src/modules/vault/uploads.repository.js';
import { packVector, vectorParam } from '../src/modules/search/vectors.js';
import { LocalEmbedder } from '../src/providers/embeddings/index.js';
import { newId } from '../src/shared/ids.js';
import { makeWorld, openTestDatabase } from './support/app.js';
import { seededRandom } from './support/random.js';

/**
 * The in-memory copies of upload indexes (search/segments.ts) against Postgres itself: the tsvector
 * reader against unnest(tsv), BM25 scored from the copies against the same formula evaluated in SQL
 * over the stored tsvectors, and the cache's version check and memory bound.
 */
let database: Database;
const uploads: string[] = [];
const embedder = new LocalEmbedder(384);

const TEXTS = [
  "O'Brien's rock'n'roll café: naïve back\\slash C:\\temp and 'quoted' words.",
  'Boundary layer transition on a flat plate at supersonic speed; the boundary layer thickens downstream.',
  'Heat transfer in the laminar boundary layer of a cone at Mach 6, with wall cooling and heat flux measured.',
  `${'flutter '.repeat(300)}of wings`,
  'Σύγχρονη αεροδυναμική — 航空 — the shock wave and the expansion fan meet at the corner.',
  'Shock wave boundary layer interaction: separation, reattachment and the pressure plateau.',
];

async function addUpload(texts: string[]): Promise<string> {
  const db = database.db;
  const w = await makeWorld(database);
  const id = newId();
  await insertUpload(db, { id, originalname: 'f.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: w.userA1.id, accountId: w.accountA.id, status: 'processing', storageKey: id, sha256: id });
  const vectors = await embedder.embed(texts);
  await writeIndexedChunks(
    db,
    id,
    texts.map((text, i) => ({ id: newId(), index: i, text, heading: null, tokens: 10, embedding: packVector(vectors[i]!, 384) })),
    new Date(),
  );
  await refreshUploadIndex(db, id);
  await db.execute(sql`update uploads set status = 'active' where id = ${id}`);
  // under the HNSW index, as the background drain would put them (the index's own settings are tested here)
  while ((await drainStagedVectors(db, 1000)) > 0);
  return id;
}

/** The chunk ids a websearch filter lets through. */
function allowedIds(allowed: Allowed): Set<string> {
  const out = new Set<string>();
  for (const [s, hit] of allowed) for (let o = 0; o < hit.length; o++) if (hit[o]) out.add(s.ids[o]!);
  return out;
}

const scopeOf = async (ids: string[]) =>
  (
    await rowsOf<{ id: string; chunks: number; lex_len: number; version: string }>(
      database.db,
      sql`select upload_id as id, chunks, lex_len::float8 as lex_len, version from upload_index_stats where upload_id = any(${`{${ids.join(',')}}`}::text[])`,
    )
  ).map((r) => ({ id: r.id, chunks: Number(r.chunks), lexLen: Number(r.lex_len), version: Number(r.version) }));

before(async () => {
  database = await openTestDatabase();
  uploads.push(await addUpload(TEXTS.slice(0, 3)), await addUpload(TEXTS.slice(3)));
});

after(() => database.close());

test('the tsvector reader gives the lexemes and position counts Postgres gives (quotes, backslashes, the cap on positions, non-Latin text)', async () => {
  for (const text of [...TEXTS, "it''s a ''''", '\\\\ \\\' \'\\', '']) {
    const [row] = await rowsOf<{ tsv: string }>(database.db, sql`select to_tsvector('english', ${text})::text as tsv`);
    const expected = await rowsOf<{ lexeme: string; tf: number }>(
      database.db,
      sql`select t.lexeme, coalesce(array_length(t.positions, 1), 1)::int as tf from unnest(to_tsvector('english', ${text})) t order by t.lexeme`,
    );
    const got: Array<{ lexeme: string; tf: number }> = [];
    forEachLexeme(row!.tsv, (lexeme, tf) => got.push({ lexeme, tf }));
    got.sort((a, b) => (a.lexeme < b.lexeme ? -1 : a.lexeme > b.lexeme ? 1 : 0));
    assert.deepEqual(got, expected.map((e) => ({ lexeme: e.lexeme, tf: Number(e.tf) })), text);
  }
  // the cap: Postgres keeps a bounded number of positions of a lexeme (300 written, fewer kept), and so does the count
  const flutter: number[] = [];
  const [row] = await rowsOf<{ tsv: string; kept: number }>(
    database.db,
    sql`select to_tsvector('english', ${TEXTS[3]!})::text as tsv, (select array_length(t.positions, 1) from unnest(to_tsvector('english', ${TEXTS[3]!})) t where t.lexeme = 'flutter') as kept`,
  );
  forEachLexeme(row!.tsv, (lexeme, tf) => lexeme === 'flutter' && flutter.push(tf));
  assert.ok(Number(row!.kept) < 300);
  assert.deepEqual(flutter, [Number(row!.kept)]);
});

test('BM25 from the in-memory copies equals the formula evaluated by Postgres over the stored tsvectors', async () => {
  const cache = new SegmentCache(64 * 1024 * 1024);
  const scope = await scopeOf(uploads);
  const segments = await cache.segmentsOf(database.db, scope);
  const n = scope.reduce((s, u) => s + u.chunks, 0);
  const scopeAvgdl = scope.reduce((s, u) => s + u.lexLen, 0) / n;
  // the same copies ranked with the statistics of two scopes (a copy keeps its length normalisation for the last ones)
  for (const [avgdl, query] of [scopeAvgdl, scopeAvgdl * 3, scopeAvgdl].flatMap((d) =>
    ['boundary layer', 'shock wave boundary layer heat', 'flutter', "o'brien café", 'nothing matches this'].map((q) => [d, q] as const),
  )) {
    const lexemes = (await rowsOf<{ lexeme: string; qtf: number }>(database.db, sql`select t.lexeme, coalesce(array_length(t.positions, 1), 1)::int as qtf from unnest(to_tsvector('english', ${query})) t`)).map((l) => ({ lexeme: l.lexeme, qtf: Number(l.qtf) }));
    const expected = await rowsOf<{ id: string; score: number }>(
      database.db,
      sql`with q as (select * from unnest(${`{${lexemes.map((l) => `"${l.lexeme.replace(/"/g, '\\"')}"`).join(',')}}`}::text[], ${`{${lexemes.map((l) => l.qtf).join(',')}}`}::float8[]) as q(lexeme, qtf)),
           post as (select c.id, c.lex_len, t.lexeme, coalesce(array_length(t.positions, 1), 1)::float8 as tf
                      from chunks c cross join lateral unnest(c.tsv) t where c.upload_id = any(${`{${uploads.join(',')}}`}::text[])),
           df as (select lexeme, count(*)::float8 as n from post group by lexeme)
         select post.id, sum(q.qtf * ln(1 + (${n}::float8 - df.n + 0.5) / (df.n + 0.5)) * post.tf * (${BM25.k1}::float8 + 1)
                  / (post.tf + ${BM25.k1}::float8 * (1 - ${BM25.b}::float8 + ${BM25.b}::float8 * post.lex_len / ${avgdl}::float8))) as score
           from post join q using (lexeme) join df using (lexeme) group by post.id order by score desc, post.id`,
    );
    const got = bm25(segments, lexemes, 50, { ...BM25, n, avgdl });
    assert.deepEqual(got.hits.map((h) => h.id), expected.map((e) => e.id), query);
    for (const [i, h] of got.hits.entries()) assert.ok(Math.abs(h.score - Number(expected[i]!.score)) < 1e-9, `${query}: ${h.score} vs ${expected[i]!.score}`);
    if (query === 'nothing matches this') assert.equal(got.hits.length, 0);
    else assert.ok(got.hits.length > 0, query);
  }
  // the websearch filter: only allowed chunks are ranked, and their document frequencies count only them
  const allowed = new Set((await rowsOf<{ id: string }>(database.db, sql`select id from chunks where tsv @@ websearch_to_tsquery('english', '"shock wave" -separation')`)).map((r) => r.id));
  assert.equal(allowed.size, 1);
  const filtered = bm25(segments, [{ lexeme: 'shock', qtf: 1 }], 10, { ...BM25, n, avgdl: scopeAvgdl }, allowedOf(segments, allowed));
  assert.deepEqual(filtered.hits.map((h) => h.id), [...allowed]);
  assert.equal(filtered.df.get('shock'), 1);
});

test('BM25 top k of weighted, expanded queries over 400 chunks in 8 files equals the formula evaluated by Postgres (with the pruning of chunks that cannot make the top k)', async () => {
  // a 60-word vocabulary with Zipf-like frequencies: long postings for common words, as RM3 expands into
  const vocabulary = Array.from({ length: 60 }, (_, i) => `w${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}q`);
  let seed = 11;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const word = () => vocabulary[Math.min(59, Math.floor(60 * rand() ** 2.5))]!;
  const ids: string[] = [];
  for (let f = 0; f < 8; f++) ids.push(await addUpload(Array.from({ length: 50 }, () => Array.from({ length: 5 + Math.floor(rand() * 60) }, word).join(' '))));
  const scope = await scopeOf(ids);
  const segments = await new SegmentCache(64 * 1024 * 1024).segmentsOf(database.db, scope);
  const n = scope.reduce((sum, u) => sum + u.chunks, 0);
  const avgdl = scope.reduce((sum, u) => sum + u.lexLen, 0) / n;
  let scored = 0;
  let matched = 0;
  for (let q = 0; q < 25; q++) {
    const words = [...new Set(Array.from({ length: 2 + Math.floor(rand() * 14) }, word))];
    const lexemes = (await rowsOf<{ lexeme: string }>(database.db, sql`select t.lexeme from unnest(to_tsvector('english', ${words.join(' ')})) t`)).map((l, i) => ({
      lexeme: l.lexeme,
      qtf: i % 3 === 0 ? 1 : 0.05 + rand() / 10,
    }));
    for (const k of [1, 5, 20]) {
      const expected = await rowsOf<{ id: string; score: number }>(
        database.db,
        sql`with q as (select * from unnest(${`{${lexemes.map((l) => l.lexeme).join(',')}}`}::text[], ${`{${lexemes.map((l) => l.qtf).join(',')}}`}::float8[]) as q(lexeme, qtf)),
             post as (select c.id, c.lex_len, t.lexeme, coalesce(array_length(t.positions, 1), 1)::float8 as tf
                        from chunks c cross join lateral unnest(c.tsv) t where c.upload_id = any(${textArray(ids)}::text[])),
             df as (select lexeme, count(*)::float8 as n from post group by lexeme)
           select post.id, sum(q.qtf * ln(1 + (${n}::float8 - df.n + 0.5) / (df.n + 0.5)) * post.tf * (${BM25.k1}::float8 + 1)
                    / (post.tf + ${BM25.k1}::float8 * (1 - ${BM25.b}::float8 + ${BM25.b}::float8 * post.lex_len / ${avgdl}::float8))) as score
             from post join q using (lexeme) join df using (lexeme) group by post.id order by score desc, post.id limit ${k}`,
      );
      const got = bm25(segments, lexemes, k, { ...BM25, n, avgdl });
      scored += got.scored;
      matched += Number((await rowsOf<{ n: number }>(database.db, sql`select count(*)::int as n from chunks where upload_id = any(${textArray(ids)}::text[]) and tsv @@ ${lexemes.map((l) => l.lexeme).join(' | ')}::tsquery`))[0]!.n);
      assert.equal(got.hits.length, expected.length);
      for (const [i, h] of got.hits.entries()) assert.ok(Math.abs(h.score - Number(expected[i]!.score)) < 1e-9, `${words.join(' ')} k=${k} #${i}: ${h.score} vs ${expected[i]!.score}`);
      // the same chunks, except that chunks of one score (to rounding) at the cut may be any of them
      const last = got.hits[got.hits.length - 1]!.score;
      assert.deepEqual(new Set(got.hits.filter((h) => h.score > last + 1e-9).map((h) => h.id)), new Set(expected.filter((e) => Number(e.score) > last + 1e-9).map((e) => e.id)));
    }
  }
  // the pruning did leave chunks unscored, and the results above are still exact
  assert.ok(scored < matched * 0.6, `${scored} of ${matched} matching chunks scored`);
});

test('neighbour expansion re-scores the candidates as its formula says (query likelihood over the expanded counts), from the counts Postgres stores; the tail stays below', async () => {
  // three topics over a shared background vocabulary, so that candidates have real neighbours
  const topics = [
    ['shock', 'wave', 'pressure', 'oblique', 'detached', 'nose'],
    ['boundary', 'layer', 'laminar', 'transition', 'turbulent', 'skin', 'friction'],
    ['flutter', 'wing', 'aeroelastic', 'panel', 'mode', 'stiffness'],
  ];
  const background = ['flow', 'model', 'measured', 'theory', 'results', 'effect', 'speed', 'surface'];
  const rand = seededRandom(7);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)]!;
  const ids: string[] = [];
  for (let f = 0; f < 4; f++) {
    ids.push(
      await addUpload(
        Array.from({ length: 30 }, () => {
          const main = pick(topics);
          const other = pick(topics);
          return Array.from({ length: 8 + Math.floor(rand() * 40) }, () => (rand() < 0.55 ? pick(main) : rand() < 0.5 ? pick(background) : pick(other))).join(' ');
        }),
      ),
    );
  }
  const scope = await scopeOf(ids);
  const segments = await new SegmentCache(64 * 1024 * 1024).segmentsOf(database.db, scope);
  const n = scope.reduce((sum, u) => sum + u.chunks, 0);
  const p = { ...BM25, n, avgdl: scope.reduce((sum, u) => sum + u.lexLen, 0) / n };
  // what Postgres stores: each chunk's lexeme counts and BM25 length
  const stored = new Map<string, { len: number; tf: Map<string, number> }>();
  for (const r of await rowsOf<{ id: string; lex_len: number; lexeme: string; tf: number }>(
    database.db,
    sql`select c.id, c.lex_len, t.lexeme, coalesce(array_length(t.positions, 1), 1)::int as tf
          from chunks c cross join lateral unnest(c.tsv) t where c.upload_id = any(${textArray(ids)}::text[])`,
  )) {
    const chunk = stored.get(r.id) ?? { len: Number(r.lex_len), tf: new Map() };
    chunk.tf.set(r.lexeme, Number(r.tf));
    stored.set(r.id, chunk);
  }
  const ctf = new Map<string, number>();
  for (const chunk of stored.values()) for (const [w, tf] of chunk.tf) ctf.set(w, (ctf.get(w) ?? 0) + tf);
  const tokens = [...stored.values()].reduce((sum, c) => sum + c.len, 0);
  assert.ok(Math.abs(tokens - p.n * p.avgdl) < 1e-6);
  /** the formula of expandNeighbours, written out over maps */
  const reference = (hits: Array<{ id: string; score: number }>, terms: Array<{ lexeme: string; qtf: number }>, e: { candidates: number; k: number; alpha: number }) => {
    const cand = hits.slice(0, e.candidates);
    const m = cand.length;
    const holders = new Map<string, number>();
    for (const c of cand) for (const w of stored.get(c.id)!.tf.keys()) holders.set(w, (holders.get(w) ?? 0) + 1);
    const vec = cand.map((c) => {
      const v = new Map([...stored.get(c.id)!.tf].map(([w, tf]) => [w, tf * Math.max(0, Math.log((m - holders.get(w)! + 0.5) / (holders.get(w)! + 0.5)))]));
      const norm = Math.sqrt([...v.values()].reduce((sum, x) => sum + x * x, 0)) || 1;
      return new Map([...v].map(([w, x]) => [w, x / norm]));
    });
    const cosine = (a: number, b: number) => [...vec[a]!].reduce((sum, [w, x]) => sum + x * (vec[b]!.get(w) ?? 0), 0);
    const k = Math.min(e.k, m - 1);
    const mu = p.avgdl;
    const known = terms.filter((t) => (ctf.get(t.lexeme) ?? 0) > 0);
    const weights = known.reduce((sum, t) => sum + t.qtf, 0);
    const scored = cand.map((c, d) => {
      const near = cand.map((_, b) => b).filter((b) => b !== d).sort((a, b) => cosine(d, b) - cosine(d, a) || a - b).slice(0, k);
      const sum = near.reduce((acc, b) => acc + Math.max(0, cosine(d, b)), 0);
      const gamma = near.map((b) => (sum > 0 ? Math.max(0, cosine(d, b)) / sum : 0));
      const count = (id: string, w: string) => stored.get(id)!.tf.get(w) ?? 0;
      const len = e.alpha * stored.get(c.id)!.len + near.reduce((acc, b, j) => acc + (1 - e.alpha) * gamma[j]! * stored.get(cand[b]!.id)!.len, 0);
      let score = weights * Math.log(mu / (len + mu));
      for (const t of known) {
        const cw = e.alpha * count(c.id, t.lexeme) + near.reduce((acc, b, j) => acc + (1 - e.alpha) * gamma[j]! * count(cand[b]!.id, t.lexeme), 0);
        score += t.qtf * Math.log(1 + cw / ((mu * ctf.get(t.lexeme)!) / tokens));
      }
      return { id: c.id, score, rank: d };
    });
    scored.sort((a, b) => b.score - a.score || a.rank - b.rank);
    return scored.map((x) => ({ id: x.id, score: Math.exp(x.score - scored[0]!.score) }));
  };
  let moved = 0;
  for (const query of [
    [{ lexeme: 'shock', qtf: 1 }],
    [{ lexeme: 'boundari', qtf: 0.5 }, { lexeme: 'layer', qtf: 0.5 }, { lexeme: 'laminar', qtf: 0.1 }, { lexeme: 'flow', qtf: 0.05 }],
    [{ lexeme: 'flutter', qtf: 0.4 }, { lexeme: 'wing', qtf: 0.3 }, { lexeme: 'pressur', qtf: 0.2 }, { lexeme: 'nowher', qtf: 1 }],
  ]) {
    const where = new TermPositions(segments);
    const first = bm25(segments, query, 60, p, undefined, where);
    assert.ok(first.hits.length > 20, JSON.stringify(query));
    for (const e of [
      { candidates: 40, k: 10, alpha: 0.5 },
      { candidates: 25, k: 5, alpha: 0.25 },
      { candidates: 100, k: 100, alpha: 0.75 },
      { candidates: 30, k: 10, alpha: 1 },
    ]) {
      const got = expandNeighbours(first.hits, query, where, p, e);
      const expected = reference(first.hits, query, e);
      const head = got.slice(0, expected.length);
      assert.deepEqual(head.map((h) => h.id), expected.map((x) => x.id), `${JSON.stringify(query)} ${JSON.stringify(e)}`);
      for (const [i, h] of head.entries()) assert.ok(Math.abs(h.score - expected[i]!.score) < 1e-9, `#${i}: ${h.score} vs ${expected[i]!.score}`);
      moved += head.filter((h, i) => h.id !== first.hits[i]!.id).length;
      // the hits beyond the candidates: the same chunks in the same order, every score below the candidates'
      const tail = got.slice(expected.length);
      assert.deepEqual(tail.map((h) => h.id), first.hits.slice(expected.length).map((h) => h.id));
      const floor = Math.min(...head.map((h) => h.score));
      assert.ok(tail.every((h, i) => h.score <= floor && (i === 0 || h.score <= tail[i - 1]!.score)));
      assert.equal(got.length, first.hits.length);
      assert.equal(head[0]!.score, 1);
    }
  }
  // the expansion did change orders (the comparisons above are not of identical lists)
  assert.ok(moved > 20, `${moved} moved`);
});

test('segments keep one object shape whatever was set on which segment first, and so do the BM25 parameters of every search', async () => {
  // V8's hidden classes, compared by its own %HaveSameMap (natives syntax, for this one function): the scoring loops read
  // many segments and the parameters, and their optimized code was thrown away whenever one of a new shape came
  setFlagsFromString('--allow-natives-syntax');
  const sameShape = new Function('a', 'b', 'return %HaveSameMap(a, b)') as (a: object, b: object) => boolean;
  const scope = await scopeOf(uploads);
  const segments = await new SegmentCache(64 * 1024 * 1024).segmentsOf(database.db, scope);
  assert.equal(segments.length, 2);
  const n = scope.reduce((sum, u) => sum + u.chunks, 0);
  const p = bm25Params(n, scope.reduce((sum, u) => sum + u.lexLen, 0));
  const query = [{ lexeme: 'boundari', qtf: 1 }, { lexeme: 'layer', qtf: 1 }];
  // the first segment alone: its length normalisation (BM25) and its lexemes' fingerprints (the expansion) are set
  // before anything is set on the other, which gets its normalisation afterwards and no fingerprints
  const alone = new TermPositions(segments.slice(0, 1));
  const own = bm25(alone.segments, query, 10, p, undefined, alone);
  assert.ok(own.hits.length >= 2);
  expandNeighbours(own.hits, query, alone, p, { candidates: 10, k: 1, alpha: 0.5 });
  assert.notEqual(segments[0]!.termPrints, undefined);
  const where = new TermPositions(segments);
  const both = bm25(segments, query, 10, p, undefined, where);
  assert.equal(both.hits.length, 3);
  assert.equal(segments[1]!.termPrints, undefined);
  assert.notEqual(segments[1]!.norm, undefined);
  assert.ok(sameShape(segments[0]!, segments[1]!), 'the two segments have different shapes');
  // BM25's parameters, made often enough for V8 to optimize the function that makes them
  const made = Array.from({ length: 50_000 }, (_, k) => bm25Params(1000 + k, 12_345 + 7 * k));
  assert.ok(sameShape(made[0]!, made[made.length - 1]!) && sameShape(made[made.length - 2]!, made[made.length - 1]!), 'the parameters of two searches have different shapes');
});

test('the 64-bit fingerprints (hashKey, hashKey2) that tell lexemes apart in the neighbour expansion: distinct over 300,000 keys where 32 bits collide', () => {
  // word-like keys: stems and digits, as a tsvector's lexemes are
  const keys: string[] = [];
  for (let i = 0; i < 300_000; i++) keys.push(`${String.fromCharCode(97 + (i % 26))}${(i * 7919).toString(36)}${i % 3 === 0 ? 'ing' : ''}`);
  assert.equal(new Set(keys).size, keys.length);
  const first = new Set<number>();
  let collisions = 0;
  const prints = new Set<string>();
  for (const key of keys) {
    const a = hashKey(key);
    if (first.has(a)) collisions++;
    first.add(a);
    prints.add(`${a}:${hashKey2(key)}`);
  }
  // 32 bits alone: about n²/2³³ ≈ 10 collisions expected among 300,000 keys (the second hash is what tells them apart)
  assert.ok(collisions > 0, 'the 32-bit hash collides on these keys');
  assert.equal(prints.size, keys.length);
  assert.notEqual(hashKey2('shock'), hashKey('shock'));
});

test("a scope's entities and edges read in pages give the same segments as read in one", async () => {
  const scope = await scopeOf(uploads);
  const whole = await new SegmentCache(64 * 1024 * 1024).segmentsOf(database.db, scope);
  // pages of 3 rows: page boundaries inside an upload and between two
  const paged = await new SegmentCache(64 * 1024 * 1024, { graphPageRows: 3 }).segmentsOf(database.db, scope);
  assert.ok(whole.reduce((n, s) => n + s.names.length, 0) > 3 * uploads.length, 'several pages for each upload');
  assert.ok(whole.reduce((n, s) => n + s.edges.length, 0) > 6 * uploads.length);
  const graphOf = (s: (typeof whole)[number]) => ({ names: s.names, kinds: [...s.kinds], nameStart: [...s.nameStart], mentions: [...s.mentions], edgeStart: [...s.edgeStart], edges: [...s.edges] });
  assert.deepEqual(paged.map(graphOf), whole.map(graphOf));
});

test('websearch filters (-exclusions, or) evaluated on the copies match what Postgres matches; phrases are left to Postgres', async () => {
  const segments = await new SegmentCache(64 * 1024 * 1024).segmentsOf(database.db, await scopeOf(uploads));
  const cases: Array<[string, 'copies' | 'postgres']> = [
    ['boundary -shock', 'copies'],
    ['shock or flutter -wave', 'copies'],
    ['-layer', 'copies'],
    ["o'brien -café", 'postgres'],
    ['naïve -café', 'copies'],
    ['heat or cone or mach -cooling', 'copies'],
    ['-heat -shock', 'copies'],
    ['-heat boundary', 'copies'],
    ['heat or -shock', 'copies'],
    ['-heat or shock', 'copies'],
    ['-heat or -shock', 'copies'],
    ['boundary -layer or -shock wave', 'copies'],
    ['-unknownword', 'copies'],
    ['unknownword or -heat', 'copies'],
    ['or or', 'copies'],
    ['heat -"shock wave"', 'postgres'],
    ['"boundary layer" -transition', 'postgres'],
  ];
  for (const [query, where] of cases) {
    const text = (await rowsOf<{ q: string }>(database.db, sql`select websearch_to_tsquery('english', ${query})::text as q`))[0]!.q;
    const parsed = parseTsQuery(text);
    assert.equal(parsed === undefined ? 'postgres' : 'copies', where, `${query} → ${text}`);
    if (parsed === undefined) continue;
    const expected = await rowsOf<{ id: string }>(
      database.db,
      sql`select id from chunks where upload_id = any(${`{${uploads.join(',')}}`}::text[]) and tsv @@ websearch_to_tsquery('english', ${query})`,
    );
    assert.deepEqual(allowedIds(matching(segments, parsed)), new Set(expected.map((r) => r.id)), `${query} → ${text}`);
  }
  assert.ok((await rowsOf(database.db, sql`select id from chunks where upload_id = any(${`{${uploads.join(',')}}`}::text[]) and tsv @@ websearch_to_tsquery('english', '-layer')`)).length > 0);
});

test('tsqueries of and, or and not evaluated on the copies match Postgres on a larger upload (lists of very different lengths)', async () => {
  // 400 chunks over twelve words from common (in 90% of the chunks) to rare (in 0.5%): the long lists of a
  // short intersection are skipped through, the short ones read
  const words = ['alpha', 'beta', 'gamma', 'delta', 'omega', 'sigma', 'kappa', 'zeta', 'theta', 'lambda', 'iota', 'epsilon'];
  const share = [0.9, 0.7, 0.5, 0.35, 0.25, 0.15, 0.1, 0.06, 0.03, 0.015, 0.008, 0.005];
  let seed = 12345;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const texts = Array.from({ length: 400 }, () => words.filter((_, i) => random() < share[i]!).join(' ') || 'nothing');
  const id = await addUpload(texts);
  const segments = await new SegmentCache(64 * 1024 * 1024).segmentsOf(database.db, await scopeOf([id]));
  const lexemes = await Promise.all(words.map(async (w) => (await rowsOf<{ lexeme: string }>(database.db, sql`select lexeme from unnest(to_tsvector('english', ${w}))`))[0]!.lexeme));
  const tree = (depth: number): string => {
    const r = random();
    if (depth === 0 || r < 0.3) return `${random() < 0.25 ? '!' : ''}'${lexemes[Math.floor(random() * lexemes.length)]}'`;
    const parts = Array.from({ length: 2 + Math.floor(random() * 3) }, () => tree(depth - 1));
    return `${random() < 0.2 ? '!' : ''}(${parts.join(random() < 0.6 ? ' & ' : ' | ')})`;
  };
  let skipped = 0;
  for (let q = 0; q < 150; q++) {
    const text = tree(3);
    const parsed = parseTsQuery((await rowsOf<{ q: string }>(database.db, sql`select ${text}::tsquery::text as q`))[0]!.q);
    assert.notEqual(parsed, undefined, text);
    const expected = await rowsOf<{ id: string }>(database.db, sql`select id from chunks where upload_id = ${id} and tsv @@ ${text}::tsquery`);
    assert.deepEqual(allowedIds(matching(segments, parsed!)), new Set(expected.map((r) => r.id)), text);
    if (/'(lambda|iota|epsilon)' & /.test(text)) skipped++;
  }
  assert.ok(skipped > 5, 'queries intersect a rare word with others');
});

test('relevance-feedback terms from the copies equal those Postgres computes from the stored tsvectors', async () => {
  const cache = new SegmentCache(64 * 1024 * 1024);
  const segments = await cache.segmentsOf(database.db, await scopeOf(uploads));
  const docs = segments.flatMap((segment) => segment.ids.map((id, ord) => ({ id, segment, ord, weight: 1 / (ord + 2) })));
  assert.ok(docs.length === TEXTS.length);
  const expected = await rowsOf<{ lexeme: string; weight: number }>(
    database.db,
    sql`select t.lexeme, sum(coalesce(array_length(t.positions, 1), 1)::float8 / greatest(c.lex_len, 1) * w.w) as weight
          from unnest(${`{${docs.map((d) => d.id).join(',')}}`}::text[], ${`{${docs.map((d) => d.weight).join(',')}}`}::float8[]) as w(id, w)
          join chunks c on c.id = w.id cross join lateral unnest(c.tsv) t
         where length(t.lexeme) > 1
         group by t.lexeme order by weight desc, t.lexeme limit 15`,
  );
  const got = feedbackTerms(docs, 15);
  assert.deepEqual(got.map((g) => g.lexeme), expected.map((e) => e.lexeme));
  for (const [i, g] of got.entries()) assert.ok(Math.abs(g.weight - Number(expected[i]!.weight)) < 1e-12);
});

test('graph scores and co-occurrence sums from the copies equal the same formulas over kg_mentions and kg_edges', async () => {
  const scope = await scopeOf(uploads);
  const cache = new SegmentCache(64 * 1024 * 1024);
  const segments = await cache.segmentsOf(database.db, scope);
  const n = scope.reduce((s, u) => s + u.chunks, 0);
  const inScope = sql`upload_id = any(${textArray(uploads)}::text[])`;
  // one row a chunk, its entities and their counts as parallel arrays: one row a mention here
  const mentions = sql`(select m.chunk_id, m.upload_id, e.name, e.tf from kg_mentions m cross join lateral unnest(m.names, m.tf) as e(name, tf))`;
  const names = (await rowsOf<{ name: string }>(database.db, sql`select name from ${mentions} m where ${inScope} group by name order by count(*) desc, name limit 6`)).map((r) => r.name);
  assert.ok(names.length >= 4, JSON.stringify(names));
  const weights = new Map(names.map((name, i) => [name, 1 / (i + 1)]));
  const where = new NamePositions(segments);

  // score(c) = Σ_e μ_e · ln(1 + N / df_e) · (1 + ln tf), over every chunk that mentions one of them
  const expected = await rowsOf<{ id: string; score: number }>(
    database.db,
    sql`with w as (select * from unnest(${textArray(names)}::text[], ${`{${names.map((x) => weights.get(x)).join(',')}}`}::float8[]) as w(name, mu)),
             df as (select name, count(*)::float8 as df from ${mentions} m where ${inScope} group by name)
        select m.chunk_id as id, sum(w.mu * ln(1 + ${n}::float8 / df.df) * (1 + ln(m.tf))) as score
          from ${mentions} m join w using (name) join df using (name) where m.${inScope} group by m.chunk_id`,
  );
  const got = entityScores(where, weights, n, 1000);
  assert.equal(got.length, expected.length);
  const want = new Map(expected.map((e) => [e.id, Number(e.score)]));
  for (const h of got) assert.ok(Math.abs(h.score - want.get(h.id)!) < 1e-9, `${h.id}: ${h.score} vs ${want.get(h.id)}`);
  for (let i = 1; i < got.length; i++) assert.ok(got[i - 1]!.score >= got[i]!.score);
  assert.equal(entityScores(where, weights, n, 3).length, 3);

  // co-occurrence edges touching the seeds, summed over the uploads, each edge once
  const seeds = names.slice(0, 3);
  const edges = await rowsOf<{ a: string; b: string; w: number }>(
    database.db,
    sql`select a, b, sum(weight)::int as w from kg_edges where ${inScope}
          and (a = any(${textArray(seeds)}::text[]) or b = any(${textArray(seeds)}::text[]))
         group by a, b`,
  );
  assert.ok(edges.length > 0);
  const key = (a: string, b: string) => (a < b ? `${a}\u0000${b}` : `${b}\u0000${a}`);
  const want2 = new Map(edges.map((e) => [key(e.a, e.b), Number(e.w)]));
  // summed by the names' text, and by their ids in the cache's dictionary (the segments are held)
  const byText = neighbours(where, seeds, 10_000);
  const byId = neighbours(new NamePositions(segments, cache), seeds, 10_000);
  assert.ok(segments.every((s) => cache.nameIdsOf(s) !== undefined));
  for (const summed of [byText, byId]) {
    assert.deepEqual(new Map(summed.map((e) => [key(e.a, e.b), e.w])), want2);
    for (let i = 1; i < summed.length; i++) assert.ok(summed[i - 1]!.w >= summed[i]!.w);
  }
  assert.deepEqual(byId, byText);
  // the strongest `limit` alone (held segments: names below a seed's limit-th weight are passed over, ties kept)
  for (const limit of [1, 2, 3, 5, 8, 13, byText.length - 1]) assert.deepEqual(neighbours(new NamePositions(segments, cache), seeds, limit), byText.slice(0, limit), `limit ${limit}`);
  // positions found through the cache's dictionary (a name it does not know is in no held segment) equal a probe of every segment
  const withIds = new NamePositions(segments, cache);
  for (const name of [...names, 'no such entity', 'boundary', 'mach']) assert.deepEqual(withIds.of(name), where.of(name), name);
  const off = new SegmentCache(0);
  const notHeld = await off.segmentsOf(database.db, scope);
  for (const name of [...names, 'no such entity']) assert.deepEqual(new NamePositions(notHeld, off).of(name), where.of(name), name);
  assert.ok(cache.nameScratch().every((x) => x === 0), 'the scratch sums are handed back zeroed');
});

test('a copy is used only at the version it was read at, and the cache stays within its memory bound', async () => {
  const cache = new SegmentCache(64 * 1024 * 1024);
  const scope = await scopeOf(uploads);
  await cache.segmentsOf(database.db, scope);
  assert.equal(cache.loads, 2);
  await cache.segmentsOf(database.db, scope);
  assert.equal(cache.loads, 2);
  assert.equal(cache.hits, 2);
  await database.db.execute(sql`update upload_index_stats set version = nextval('upload_index_version') where upload_id = ${uploads[0]!}`);
  await cache.segmentsOf(database.db, await scopeOf(uploads));
  assert.equal(cache.loads, 3);
  const held = cache.size.bytes;
  assert.ok(held > 0);
  // room for either alone, not for both: the least recently used goes
  const alone = async (id: string) => {
    const c = new SegmentCache(64 * 1024 * 1024);
    await c.segmentsOf(database.db, await scopeOf([id]));
    return c.size.bytes;
  };
  const bound = Math.max(await alone(uploads[0]!), await alone(uploads[1]!));
  assert.ok(bound < held);
  const small = new SegmentCache(bound);
  const one = await small.segmentsOf(database.db, await scopeOf([uploads[0]!]));
  await small.segmentsOf(database.db, await scopeOf([uploads[1]!]));
  assert.ok(small.size.bytes <= bound);
  assert.equal(small.size.segments, 1);
  assert.equal((await small.segmentsOf(database.db, await scopeOf([uploads[1]!])))[0]?.version, (await scopeOf([uploads[1]!]))[0]?.version);
  assert.equal(small.hits, 1);
  // a scope larger than the bound is still searched whole
  const both = await small.segmentsOf(database.db, await scopeOf(uploads));
  assert.equal(both.length, 2);
  assert.deepEqual(both.find((s) => s.uploadId === uploads[0])?.ids, one[0]?.ids);
  const none = new SegmentCache(0);
  assert.equal((await none.segmentsOf(database.db, await scopeOf(uploads))).length, 2);
  assert.equal(none.size.segments, 0);
});

test('the hash table of a segment\'s keys finds every key at its position and no other string', () => {
  for (const n of [0, 1, 2, 3, 5, 100, 4097]) {
    const keys = [...new Set(Array.from({ length: n }, (_, i) => `k${(i * 7919) % 100_003}é${i % 3 === 0 ? "'" : ''}`))].sort();
    const table = keyTable(keys);
    // two numbers a slot (position + 1, hash), a power of two of slots, at least 1.5 a key
    const slots = table.length / 2;
    assert.ok(slots >= keys.length * 1.5 && (slots & (slots - 1)) === 0);
    for (const [i, key] of keys.entries()) assert.equal(lookup(keys, table, key, hashKey(key)), i);
    for (const absent of ['', 'k', 'zz', `${keys[0] ?? 'x'}!`]) assert.equal(lookup(keys, table, absent, hashKey(absent)), -1);
  }
  // three strings whose hashes share a slot of a 4-slot table: the two stored are found by probing, the third is not
  const same = Array.from({ length: 40 }, (_, i) => `c${i}`).filter((k) => (hashKey(k) & 3) === (hashKey('c0') & 3));
  assert.ok(same.length >= 3);
  const keys = same.slice(0, 2).sort();
  const table = keyTable(keys);
  assert.equal(table.length, 4 * 2);
  for (const [i, key] of keys.entries()) assert.equal(lookup(keys, table, key, hashKey(key)), i);
  assert.equal(lookup(keys, table, same[2]!, hashKey(same[2]!)), -1);
});

test('TopK keeps the k best, ties broken by id', () => {
  const top = new TopK(3);
  for (const [id, score] of [['e', 1], ['b', 2], ['a', 2], ['d', 5], ['c', 2], ['f', 0]] as const) top.offer(id, score);
  assert.deepEqual(top.sorted().map(({ id, score }) => ({ id, score })), [{ id: 'd', score: 5 }, { id: 'a', score: 2 }, { id: 'b', score: 2 }]);
});

test("trigram similarity equals pg_trgm's similarity()", async () => {
  const pairs = [
    ['navier stokes', 'navier-stokes equation'],
    ['Hallvard Brekke', 'halvard brekke'],
    ['boundary layer', 'boundary layers'],
    ['NASA', 'nasa ames'],
    ['mach 6', 'mach 6.5'],
    ['x', 'y'],
    ['', 'anything'],
    ['café naïve', 'cafe naive'],
  ] as const;
  for (const [a, b] of pairs) {
    const [row] = await rowsOf<{ sim: number }>(database.db, sql`select similarity(${a}, ${b})::float8 as sim`);
    assert.ok(Math.abs(similarity(trigrams(a), trigrams(b)) - Number(row!.sim)) < 1e-6, `${a} / ${b}: ${similarity(trigrams(a), trigrams(b))} vs ${row!.sim}`);
  }
});

test('the trigram index (length and prefix filters) finds exactly the names a comparison with every name finds', () => {
  // names of 1 to 6 words over a small alphabet, so that many share trigrams and lengths vary widely
  let seed = 5;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const word = () => Array.from({ length: 2 + Math.floor(rand() * 7) }, () => 'abcdeh'[Math.floor(rand() * 6)]).join('');
  const phrase = () => Array.from({ length: 1 + Math.floor(rand() ** 2 * 6) }, word).join(' ');
  const names = [...new Set(Array.from({ length: 3000 }, phrase))];
  const dictionary = new TrigramDictionary();
  for (const name of names) dictionary.add(name);
  // released names are never found (the index keeps them until it is compacted)
  const released = new Set(names.filter((_, i) => i % 10 === 0));
  for (const name of released) dictionary.release(name);
  let found = 0;
  for (let i = 0; i < 120; i++) {
    const query = i % 2 === 0 ? names[Math.floor(rand() * names.length)]!.replace(/[aeiou]/, 'h') : phrase();
    for (const min of [0.3, 0.5, 0.8]) {
      const q = trigrams(query);
      const expected = names
        .filter((n) => !released.has(n))
        .map((name) => ({ name, sim: similarity(q, trigrams(name)) }))
        .filter((m) => m.sim >= min)
        .sort(bySimilarity);
      const got = dictionary.similar(query, min, () => true, 100_000);
      assert.deepEqual(got.map((m) => m.name), expected.map((m) => m.name), `${query} ≥ ${min}`);
      for (const [j, m] of got.entries()) assert.ok(Math.abs(m.sim - expected[j]!.sim) < 1e-12);
      found += got.length;
      // the best few that `accept` keeps: the search narrows the lengths as it finds them, and finds the same
      const accept = (name: string) => name.length % 3 !== 0;
      for (const limit of [1, 2, 5]) {
        const best = dictionary.similar(query, min, accept, limit);
        assert.deepEqual(best.map((m) => m.name), expected.filter((m) => accept(m.name)).slice(0, limit).map((m) => m.name), `${query} ≥ ${min}, best ${limit}`);
      }
    }
  }
  // the queries did find names, at every length
  assert.ok(found > 200, String(found));
});

test("the dictionary's name ids: stable until a compaction renumbers them, then read again by generation", async () => {
  const dictionary = new TrigramDictionary();
  const names = Array.from({ length: 3000 }, (_, i) => `name ${i}`);
  const ids = names.map((n) => dictionary.add(n));
  assert.deepEqual(ids, names.map((_, i) => i));
  assert.equal(dictionary.add('name 7'), 7);
  assert.equal(dictionary.idOf('name 7'), 7);
  assert.equal(dictionary.idOf('absent'), -1);
  const generation = dictionary.generation;
  // releasing more than half of them starts a compaction; once it is done the live names are renumbered
  // and the generation has moved
  for (const n of names.slice(0, 2000)) dictionary.release(n);
  assert.equal(dictionary.compacting, true);
  assert.equal(dictionary.idOf('name 100'), -1);
  await dictionary.compacted;
  assert.equal(dictionary.compacting, false);
  assert.notEqual(dictionary.generation, generation);
  // 'name 7' was added twice and released once: still held
  assert.ok(dictionary.idOf('name 7') >= 0, 'name 7 held');
  for (const n of ['name 7', 'name 2000', 'name 2999']) assert.equal(dictionary.nameAt(dictionary.idOf(n)), n);
  assert.ok(dictionary.idOf('name 2999') < 3000 - 1000, 'renumbered');
  assert.equal(dictionary.idOf('name 100'), -1);
});

test('a compaction is built in slices: the event loop runs meanwhile, and names added, released and taken up again while it runs come out right', async () => {
  const dictionary = new TrigramDictionary();
  const word = (i: number) => `w${i.toString(36)}x${((i * 7919) % 10007).toString(36)}`;
  const kept = Array.from({ length: 60_000 }, (_, i) => `kept ${word(i)}`);
  const gone = Array.from({ length: 61_500 }, (_, i) => `gone ${word(i)}`);
  // the released names first: the compaction passes over them before the test's first turn, so one taken up
  // again afterwards is found missing at the switch
  for (const n of gone) dictionary.add(n);
  for (const n of kept) dictionary.add(n);
  const generation = dictionary.generation;
  for (const n of gone) dictionary.release(n);
  assert.equal(dictionary.compacting, true);
  // the event loop gets turns while the new index is built
  let turns = 0;
  const ticking = setInterval(() => turns++, 1);
  // meanwhile: new names, a kept name released to none, a released name taken up again, a kept name released and added back
  await new Promise((resolve) => setImmediate(resolve));
  const added = Array.from({ length: 5_000 }, (_, i) => `added ${word(i)}`);
  for (const n of added) dictionary.add(n);
  dictionary.release(kept[0]!);
  dictionary.add(gone[3]!);
  dictionary.release(kept[1]!);
  dictionary.add(kept[1]!);
  assert.equal(dictionary.generation, generation, 'the switch comes later');
  assert.equal(dictionary.nameAt(dictionary.idOf(gone[3]!)), gone[3], 'lookups meanwhile use the current index');
  await dictionary.compacted;
  clearInterval(ticking);
  assert.notEqual(dictionary.generation, generation);
  assert.ok(turns > 2, `the event loop ran ${turns} times while it was built`);
  const held = [...kept.slice(1), ...added, gone[3]!];
  for (const n of held) assert.equal(dictionary.nameAt(dictionary.idOf(n)), n, n);
  assert.equal(dictionary.idOf(kept[0]!), -1);
  assert.equal(dictionary.idOf(gone[4]!), -1);
  assert.ok(dictionary.idCount <= held.length + 1, `only live names (and the one released meanwhile) are indexed: ${dictionary.idCount}`);
  // fuzzy lookups see the same names as a fresh index of the held ones
  const fresh = new TrigramDictionary();
  for (const n of held) fresh.add(n);
  for (const q of ['kept w1x7', 'added w2x', 'gone w3x', 'kept w0x0']) {
    assert.deepEqual(dictionary.similar(q, 0.4, () => true, 50), fresh.similar(q, 0.4, () => true, 50), q);
  }
});

test('fuzzy entity matches are the same from the shared trigram index (segments held) and name by name (cache off)', async () => {
  const held = new SegmentCache(64 * 1024 * 1024);
  const off = new SegmentCache(0);
  const scope = await scopeOf(uploads);
  const a = await held.segmentsOf(database.db, scope);
  const b = await off.segmentsOf(database.db, scope);
  for (const text of ['boundary layr', 'shock wave', 'heat transfer', 'flutter', 'pressure plateaus']) {
    const x = held.similarEntities(a, text, 0.5, 3);
    assert.deepEqual(x, off.similarEntities(b, text, 0.5, 3), text);
    if (text !== 'flutter') assert.ok(x.length > 0, text);
  }
  // with kind filters: the proper names' dictionary (every name of it in scope when the scope holds every held upload) and a narrower one
  for (const kinds of [new Set(['name', 'acronym']), new Set(['name']), new Set(['phrase'])]) {
    for (const text of ['mach', "o'brian", 'brien', 'boundary layr']) assert.deepEqual(held.similarEntities(a, text, 0.3, 3, kinds), off.similarEntities(b, text, 0.3, 3, kinds), `${text} ${[...kinds].join()}`);
  }
  assert.ok(held.similarEntities(a, 'mach', 0.3, 3, new Set(['name', 'acronym'])).length > 0);
  // a kind filter, and names of uploads outside the scope never match
  assert.deepEqual(held.similarEntities(a, 'boundary layer', 0.5, 3, new Set(['acronym'])), []);
  const first = await held.segmentsOf(database.db, await scopeOf([uploads[1]!]));
  assert.ok(!held.similarEntities(first, 'heat transfer', 0.5, 3).some((m) => m.name.includes('heat')));
});

test('the dense search by the index turns on iterative scanning (a filtered top-k is not short) for its own statement only', async () => {
  const words = 'boundary layer shock wave flutter heat transfer cone wing panel buckling pressure plateau separation'.split(' ');
  const texts = (n: number, seed: number) => Array.from({ length: n }, (_, i) => `${words[(i * 7 + seed) % words.length]} ${words[(i * 3 + seed) % words.length]} ${i} ${seed}`);
  // the file searched holds a tenth of the indexed vectors: a walk of 2k candidates without iterative scanning
  // finds fewer than k of its own (37 of 60 when the settings were broken on purpose)
  const [a] = [await addUpload(texts(60, 1)), await addUpload(texts(270, 2)), await addUpload(texts(270, 3))];
  const [query] = await embedder.embed(['boundary layer heat transfer']);
  const vector = packVector(query!, 384);
  const scope = sql`u.id = ${a!}`;
  const plain = sql`select e.chunk_id from chunk_vectors e where e.upload_id in (select u.id from uploads u where ${scope})
                     order by e.embedding <=> ${vectorParam(vector)} limit 60`;
  const counts = await database.db.transaction(async (tx) => {
    // no sort: the planner walks the HNSW index rather than sorting the file's 60 vectors
    await tx.execute(sql`set local enable_sort = off`);
    const withoutSettings = (await rowsOf<{ id: string }>(tx, plain)).length; // pgvector's defaults: no iterative scan, ef_search 40
    const found = await denseSearch(tx, scope, vector, 60, false);
    return { withoutSettings, found: found.length };
  });
  assert.ok(counts.withoutSettings < 60, `the index walk without the settings is short: ${counts.withoutSettings}`);
  assert.equal(counts.found, 60);
  // local to the statement's transaction: the session keeps pgvector's defaults
  assert.equal((await denseSearch(database.db, scope, vector, 60, false)).length, 60);
  const [after] = await rowsOf<{ scan: string; ef: string }>(database.db, sql`select current_setting('hnsw.iterative_scan') as scan, current_setting('hnsw.ef_search') as ef`);
  assert.deepEqual(after, { scan: 'off', ef: '40' });
});

test('the graph rows ingestion computes in its sandbox (uploadGraph) equal the rows the SQL refresh computes from the stored mentions', async () => {
  const db = database.db;
  const w = await makeWorld(database);
  const id = newId();
  await insertUpload(db, { id, originalname: 'g.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: w.userA1.id, accountId: w.accountA.id, status: 'processing', storageKey: id, sha256: id });
  // names whose order differs between UTF-16 code units, code points and a linguistic collation; one name
  // found with several kinds; more than EDGE_RANK mentions in a chunk; ranks given out of order
  // and a quote and a backslash: an edge list travels as array text inside an array literal (escaped twice)
  const pool = ['zeta', 'Zeta', 'a-b', 'ab', 'a b', 'é', 'e', '\u{1F600} face', '\uFFFD mark', 'ﬁre', 'fire', '10 km', 'nasa', 'boundary layer', 'x', 'say "hi"', 'back\\slash'];
  const kinds: EntityKind[] = ['name', 'acronym', 'quantity', 'phrase'];
  let seed = 11;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const chunks = Array.from({ length: 40 }, () => {
    const names = [...new Set(Array.from({ length: 3 + Math.floor(next() * 12) }, () => pool[Math.floor(next() * pool.length)]!))];
    const mentions: Mention[] = names.map((name, i) => ({ name, kind: kinds[Math.floor(next() * kinds.length)]!, tf: 1 + Math.floor(next() * 4), rank: i + 1 }));
    return mentions.reverse();
  });
  const rows = chunks.map((mentions, i) => ({ id: newId(), index: i, text: `chunk ${i}`, heading: null, tokens: 2, mentions, embedding: packVector([1, 0, 0].concat(new Array(381).fill(0)), 384) }));
  await writeIndexedChunks(db, id, rows, new Date());
  await refreshUploadIndex(db, id); // the SQL refresh over the stored mentions
  const sqlRows = {
    entities: await rowsOf<{ name: string; kind: string; n: number }>(db, sql`select name, kind, chunk_count as n from kg_entities where upload_id = ${id}`),
    edges: await rowsOf<{ a: string; b: string; w: number }>(db, sql`select a, b, weight as w from kg_edges where upload_id = ${id}`),
  };
  const js = uploadGraph(chunks);
  const names = graphNames(js);
  // the lists ingestion writes (edgeLists), one row an edge as the kg_edges view shows them
  const edgeRows = (graph: UploadGraph, of: readonly string[]) => edgeLists(graph, of).flatMap(([a, bs, ws]) => bs.map((b, i) => [a, b, ws[i]!] as const));
  const sorted = <T>(xs: T[]) => xs.map((x) => JSON.stringify(x)).sort();
  assert.deepEqual(sorted(entityRows(js, names)), sorted(sqlRows.entities.map((e) => [e.name, e.kind, Number(e.n)])));
  assert.deepEqual(sorted(edgeRows(js, names)), sorted(sqlRows.edges.map((e) => [e.a, e.b, Number(e.w)])));
  assert.ok(edgeRows(js, names).length > 20 && names.includes('\u{1F600} face'));
  // in the order of the tables' primary keys (the "C" collation's): a new upload's rows append to the btree
  const ordered = {
    entities: await rowsOf<{ name: string }>(db, sql`select name from kg_entities where upload_id = ${id} order by name collate "C"`),
    edges: await rowsOf<{ a: string; b: string }>(db, sql`select a, b from kg_edges where upload_id = ${id} order by a collate "C", b collate "C"`),
  };
  assert.deepEqual(names, ordered.entities.map((e) => e.name));
  assert.deepEqual(edgeRows(js, names).map((e) => [e[0], e[1]]), ordered.edges.map((e) => [e.a, e.b]));
  // and written through the ingestion's path, the same rows again
  await db.execute(sql`delete from kg_entities where upload_id = ${id}`);
  await db.execute(sql`delete from kg_edge_lists where upload_id = ${id}`);
  await writeUploadGraph(db, id, js);
  const again = {
    entities: await rowsOf<{ name: string; kind: string; n: number }>(db, sql`select name, kind, chunk_count as n from kg_entities where upload_id = ${id}`),
    edges: await rowsOf<{ a: string; b: string; w: number }>(db, sql`select a, b, weight as w from kg_edges where upload_id = ${id}`),
  };
  assert.deepEqual(sorted(again.entities), sorted(sqlRows.entities));
  assert.deepEqual(sorted(again.edges), sorted(sqlRows.edges));
  await db.execute(sql`delete from uploads where id = ${id}`);
});

test('code point order is the "C" collation\'s, not UTF-16 code unit order', async () => {
  const words = ['a', 'b', 'ab', 'a b', 'é', 'z', '\uFFFD', '\u{1F600}', '\u{10000}', '\uE000', 'Z', ''];
  const [row] = await rowsOf<{ w: string[] }>(database.db, sql`select array_agg(w order by w collate "C") as w from unnest(${textArray(words)}::text[]) w`);
  assert.deepEqual([...words].sort(compareCodePoints), row!.w);
  // UTF-16 order differs here: a surrogate pair sorts before U+E000 there
  assert.notDeepEqual([...words].sort(), row!.w);
});

test('a chunk edit recomputes only the graph rows its old and new entities touch, and they equal a full recompute', async () => {
  const db = database.db;
  const w = await makeWorld(database);
  const id = newId();
  await insertUpload(db, { id, originalname: 'e.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: w.userA1.id, accountId: w.accountA.id, status: 'processing', storageKey: id, sha256: id });
  const pool = ['wing', 'Wing', 'flutter', 'NASA', 'nasa', 'é', 'e', '\u{1F600} face', '\uFFFD mark', '10 km', 'boundary layer', 'shock', 'panel', 'x'];
  const kinds: EntityKind[] = ['name', 'acronym', 'quantity', 'phrase'];
  let seed = 5;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const randomMentions = (): Mention[] =>
    [...new Set(Array.from({ length: 2 + Math.floor(next() * 12) }, () => pool[Math.floor(next() * pool.length)]!))].map((name, i) => ({
      name,
      kind: kinds[Math.floor(next() * kinds.length)]!,
      tf: 1 + Math.floor(next() * 3),
      rank: i + 1,
    }));
  const vector = packVector([1].concat(new Array(383).fill(0)), 384);
  const rows = Array.from({ length: 30 }, (_, i) => ({ id: newId(), index: i, text: `chunk ${i}`, heading: null, tokens: 2, mentions: randomMentions(), embedding: vector }));
  await writeIndexedChunks(db, id, rows, new Date());
  await refreshUploadIndex(db, id);
  const graphRows = async () => ({
    entities: (await rowsOf(db, sql`select name, kind, chunk_count from kg_entities where upload_id = ${id} order by name collate "C"`)).map((r) => JSON.stringify(r)),
    edges: (await rowsOf(db, sql`select a, b, weight from kg_edges where upload_id = ${id} order by a collate "C", b collate "C"`)).map((r) => JSON.stringify(r)),
  });
  for (let edit = 0; edit < 12; edit++) {
    const chunk = rows[Math.floor(next() * rows.length)]!;
    // some edits remove every entity of the chunk, some bring names no other chunk has
    const mentions = edit % 4 === 3 ? [] : edit % 4 === 2 ? [{ name: `only-here-${edit}`, kind: 'phrase' as const, tf: 1, rank: 1 }, ...randomMentions().map((m) => ({ ...m, rank: m.rank + 1 }))] : randomMentions();
    await db.transaction((tx) => replaceChunkText(tx, chunk.id, `edited ${edit}`, 2, vector, mentions, new Date()));
    const incremental = await graphRows();
    await refreshUploadIndex(db, id);
    assert.deepEqual(incremental, await graphRows(), `after edit ${edit}`);
  }
  assert.ok((await graphRows()).edges.length > 10);
  await db.execute(sql`delete from uploads where id = ${id}`);
});
