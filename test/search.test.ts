import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { makeSnippet, queryTerms, SNIPPET_TARGET, WORD_RE, wordSpans } from '../src/modules/search/snippet.js';
import { bearer, login, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { seededRandom } from './support/random.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

/**
 * POST /api/user/files/search-content on the real app and a real PGlite, files ingested by the real
 * pipeline (local hashed n-gram embedder, BM25, knowledge graph).
 */

type World = Awaited<ReturnType<typeof makeWorld>>;
let t: TestApp;
let w: World;
const tokens: Record<string, string> = {};
const ids: Record<string, string> = {};

const search = (token: string, payload: unknown) =>
  t.app.inject({ method: 'POST', url: '/api/user/files/search-content', headers: { ...bearer(token), 'content-type': 'application/json' }, payload: JSON.stringify(payload) });

async function put(token: string, name: string, text: string, fields: Record<string, string>) {
  const u = await uploadOk(t.app, token, { name: `${name}.txt`, content: text, type: 'text/plain' }, fields);
  const done = await waitForIngestion(t.app, token, u._id);
  assert.equal(done.status, 'active', JSON.stringify(done));
  ids[name] = u._id;
  return u._id as string;
}

const uploadIdsOf = (body: any) => new Set<string>(body.results.map((r: any) => r.uploadId));

before(async () => {
  // the rate-limit test runs a second app with the default limit (20) on the same database
  t = await startTestApp({ env: { SEARCH_RATE_LIMIT_PER_MINUTE: '1000' } });
  w = await makeWorld(t.database);
  for (const [k, u] of Object.entries({ a1: w.userA1, a1admin: w.adminA1, a2: w.userA2, b1: w.userB1 })) tokens[k] = (await login(t.app, u.email)).accessToken;
  // user A1: personal, instance (A1), account (A) files; others: files that must never reach A1's user
  // the Hemlock Guild is named once, beside ten words said twice: the lexical side's relevance feedback
  // (its ten strongest terms) does not reach the guild's own file, the graph's edge from the name does
  await put(
    tokens.a1!,
    'zorblax',
    'Zorblax Quintavern founded the Hemlock Guild. Zorblax Quintavern sailed and sailed, charted and charted, mapped and mapped, ' +
      'painted and painted, sang and sang, danced and danced, wrote and wrote, rowed and rowed.',
    { scope: 'personal' },
  );
  await put(tokens.a1!, 'guild', 'The Hemlock Guild trades amber and salt along the northern coast every spring.', { scope: 'instance' });
  await put(tokens.a1!, 'turbines', 'Wind turbines convert the kinetic energy of moving air into electricity; the rotor blades drive a generator.', { scope: 'account' });
  await put(tokens.a1admin!, 'secret', 'Confidential merger plan: Project Nightjar acquires Bluewave Dynamics for 40 million.', { scope: 'instance', confidential: 'true' });
  await put(tokens.a1admin!, 'privatefile', 'Private memo about the Hemlock Guild budget for the lighthouse restoration.', { scope: 'instance', is_private: 'true' });
  await put(tokens.a2!, 'other-institution', 'The Hemlock Guild of Acme History archives maritime trade records.', { scope: 'instance' });
  await put(tokens.b1!, 'other-account', 'The Hemlock Guild in Beta Law handles salt disputes.', { scope: 'account' });
});

after(async () => {
  await t.close();
});

describe('bounds', () => {
  test('query, limit, minScore and selectedUploadIds out of bounds are 400s with the contract body', async () => {
    const cases: Array<[unknown, string]> = [
      [{}, 'query'],
      [{ query: '   ' }, 'query'],
      [{ query: 'x'.repeat(501) }, 'query'],
      [{ query: 'guild', limit: 0 }, 'limit'],
      [{ query: 'guild', limit: 101 }, 'limit'],
      [{ query: 'guild', limit: 2.5 }, 'limit'],
      [{ query: 'guild', minScore: -0.01 }, 'minScore'],
      [{ query: 'guild', minScore: 1.01 }, 'minScore'],
      [{ query: 'guild', selectedUploadIds: Array.from({ length: 5001 }, () => ids.guild) }, 'selectedUploadIds'],
      [{ query: 'guild', selectedUploadIds: 'not-a-list' }, 'selectedUploadIds'],
    ];
    for (const [payload, field] of cases) {
      const res = await search(tokens.a2!, payload);
      assert.equal(res.statusCode, 400, `${JSON.stringify(payload).slice(0, 80)} → ${res.body}`);
      const body = res.json();
      assert.equal(body.success, false);
      assert.equal(body.error.code, 'VALIDATION_FAILED');
      assert.ok(JSON.stringify(body.error.details).includes(field), `${field} named in ${res.body}`);
    }
  });

  test('the edges of the bounds are accepted: 500 characters after trimming, limit 1 and 100, minScore 0 and 1, 5000 ids', async () => {
    for (const payload of [
      { query: `  ${'guild '.repeat(83)}gu  ` },
      { query: 'guild', limit: 1 },
      { query: 'guild', limit: 100, minScore: 0 },
      { query: 'guild', minScore: 1 },
      { query: 'guild', selectedUploadIds: Array.from({ length: 5000 }, () => ids.guild) },
    ]) {
      const res = await search(tokens.a2!, payload);
      assert.equal(res.statusCode, 200, res.body);
    }
  });

  test('without a token: 401', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/user/files/search-content', payload: { query: 'guild' } });
    assert.equal(res.statusCode, 401);
  });

  test('limit defaults to 10 and caps the results; the query is echoed as sent', async () => {
    const res = await search(tokens.a1!, { query: ' Hemlock Guild ' });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.success, true);
    assert.equal(body.query, ' Hemlock Guild ');
    assert.ok(body.results.length <= 10);
    const one = (await search(tokens.a1!, { query: 'Hemlock Guild', limit: 1 })).json();
    assert.equal(one.results.length, 1);
    assert.equal(typeof body.tookMs, 'number');
  });
});

describe('scope', () => {
  test("another institution's, another account's and another user's private files never appear, not even in uploadCount", async () => {
    const body = (await search(tokens.a1!, { query: 'Hemlock Guild', limit: 100 })).json();
    const found = uploadIdsOf(body);
    for (const name of ['privatefile', 'other-institution', 'other-account']) assert.ok(!found.has(ids[name]!), `${name} must not be found`);
    assert.ok(found.has(ids.zorblax!) && found.has(ids.guild!));
    // personal, instance (A1: guild, secret), account (A: turbines): 4 uploads; not the private, A2 or B files
    assert.equal(body.uploadCount, 4);
    for (const r of body.results) assert.equal(r.upload.status, 'active');
  });

  test('selectedUploadIds is intersected with the scope; foreign, malformed and non-string ids (a NUL at any depth included) are dropped silently', async () => {
    const res = await search(tokens.a1!, {
      query: 'Hemlock Guild',
      selectedUploadIds: [ids.guild, ids['other-account'], ids.privatefile, 'not-an-id', 'Z'.repeat(3000), 42, null, ids.guild!.toUpperCase(), 'bad\u0000id', `${ids.guild}\u0000`, { id: 'x' }, ['y'], { id: 'bad\u0000id' }, ['bad\u0000id']],
    });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.uploadCount, 1);
    assert.deepEqual([...uploadIdsOf(body)], [ids.guild]);
  });

  test('a selection of only foreign ids searches nothing (not the whole scope)', async () => {
    const body = (await search(tokens.a1!, { query: 'Hemlock Guild', selectedUploadIds: [ids['other-account']] })).json();
    assert.equal(body.uploadCount, 0);
    assert.equal(body.results.length, 0);
    assert.equal(body.totalScanned, 0);
  });

  test('the other account sees its own file and none of account A', async () => {
    const body = (await search(tokens.b1!, { query: 'Hemlock Guild', limit: 100 })).json();
    assert.deepEqual([...uploadIdsOf(body)], [ids['other-account']]);
    assert.equal(body.uploadCount, 1);
  });
});

describe('sources, fusion and snippets', () => {
  test('an exact name is found by the graph; its co-occurring entity brings a file only the graph finds (kag); the file with the name is found by both (fused)', async () => {
    const body = (await search(tokens.a1!, { query: 'Zorblax Quintavern', limit: 20 })).json();
    const byUpload = new Map(body.results.map((r: any) => [r.uploadId, r]));
    const named: any = byUpload.get(ids.zorblax);
    assert.ok(named, 'the file naming Zorblax Quintavern is found');
    assert.equal(named.source, 'fused');
    assert.ok(named.scores.kag > 0 && named.scores.lexical > 0);
    const hop: any = byUpload.get(ids.guild);
    assert.ok(hop, 'the Hemlock Guild file is reached one hop away');
    assert.equal(hop.source, 'kag');
    assert.equal(hop.scores.lexical, undefined);
    assert.ok(named.score > hop.score);
    for (const r of body.results) assert.ok(r.score >= 0 && r.score <= 1);
    const scores = body.results.map((r: any) => r.score);
    assert.deepEqual(scores, [...scores].sort((a: number, b: number) => b - a));
  });

  test('a misspelt name is still found (trigram-fuzzy entity match)', async () => {
    const body = (await search(tokens.a1!, { query: 'Zorblaks Quintavern' })).json();
    assert.equal(body.results[0]?.uploadId, ids.zorblax);
  });

  test('a paraphrase without a shared word is found by the dense side alone (rag)', async () => {
    // no lexeme in common with the turbine file ("turbine" vs "turbines" stem alike, so none of its words are used)
    const body = (await search(tokens.a1!, { query: 'rotating wind-powered electrical generators' })).json();
    const hit = body.results.find((r: any) => r.uploadId === ids.turbines);
    assert.ok(hit, JSON.stringify(body.results.map((r: any) => [r.upload.originalname, r.scores])));
    assert.equal(hit.source, 'rag');
    assert.ok(hit.scores.dense > 0);
  });

  test('-exclusions hold for every side: no result holds an excluded word or phrase, whichever side found it', async () => {
    const texts = async (query: string) => {
      const res = await search(tokens.a1!, { query, limit: 100 });
      assert.equal(res.statusCode, 200, res.body);
      const rows = await rowsOf<{ id: string; text: string }>(t.database.db, sql`select id, text from chunks where id = any(${`{${res.json().results.map((r: any) => r.chunkId).join(',')}}`}::text[])`);
      return { body: res.json(), text: new Map(rows.map((r) => [r.id, r.text])) };
    };
    // without the exclusion the Hemlock Guild's files are found, by every side
    const plain = await texts('guild');
    assert.ok(plain.body.results.some((r: any) => r.uploadId === ids.guild));
    // with it, none of them: the dense side's and the graph side's finds are filtered like the lexical side's
    const excluded = await texts('guild -hemlock');
    for (const r of excluded.body.results) assert.doesNotMatch(excluded.text.get(r.chunkId)!, /hemlock/i, `${r.upload.originalname} (${r.source}) holds the excluded word`);
    assert.equal(excluded.body.totalScanned, excluded.body.results.length);
    // a phrase: the guild's file goes ("northern coast"), the founder's file, which names the guild too, stays
    const phrase = await texts('Hemlock Guild -"northern coast"');
    assert.ok(!phrase.body.results.some((r: any) => r.uploadId === ids.guild));
    assert.ok(phrase.body.results.some((r: any) => r.uploadId === ids.zorblax));
  });

  test('snippets: about 200 characters around the matched terms, cut on words; confidential files show exactly [confidential] and leak nowhere', async () => {
    const long = `${'Filler sentence about nothing in particular. '.repeat(12)}The quasar Andromeda-Xi emits bright radio bursts near the galactic core. ${'More filler text follows here. '.repeat(12)}`;
    await put(tokens.a1!, 'quasar', long, { scope: 'personal' });
    const body = (await search(tokens.a1!, { query: 'quasar radio bursts' })).json();
    const hit = body.results.find((r: any) => r.uploadId === ids.quasar);
    assert.ok(hit);
    assert.ok(hit.snippet.includes('quasar Andromeda-Xi emits bright radio bursts'), hit.snippet);
    assert.ok(hit.snippet.length <= 210 && hit.snippet.length >= 150, `${hit.snippet.length}: ${hit.snippet}`);
    assert.ok(hit.snippet.startsWith('… ') && hit.snippet.endsWith(' …'));
    assert.equal(hit.text, undefined, 'the chunk text is not part of the response');

    const res = await search(tokens.a1!, { query: 'Project Nightjar merger' });
    const secret = res.json().results.find((r: any) => r.uploadId === ids.secret);
    assert.ok(secret, 'the confidential file is searchable');
    assert.equal(secret.snippet, '[confidential]');
    for (const word of ['Bluewave', 'acquires', '40 million']) assert.ok(!res.body.includes(word), `${word} leaked`);

    // a confidential personal file is in no one else's scope: its owner sees the snippet
    await put(tokens.a1!, 'own-secret', 'My own notes on the hemlock garden, marked confidential.', { scope: 'personal', confidential: 'true' });
    const own = (await search(tokens.a1!, { query: 'hemlock garden' })).json().results.find((r: any) => r.uploadId === ids['own-secret']);
    assert.equal(own.upload.confidential, true);
    assert.equal(own.snippet, 'My own notes on the hemlock garden, marked confidential.');
  });

  test('a matched word longer than the snippet: the snippet is cut inside it, never empty', async () => {
    const dna = `The reference sequence follows. ${'GATTACA'.repeat(40)} End of the sequence listing.`;
    for (const [text, query] of [
      [dna, 'GATTACA'],
      ['x'.repeat(900), 'xxxxxxxx'],
      [`a few words ${'x'.repeat(900)} and a few more`, 'xxxxxxxx'],
    ] as const) {
      const snippet = makeSnippet(text, queryTerms(query));
      const body = snippet.replace(/^… /u, '').replace(/ …$/u, '');
      assert.equal(body.length, SNIPPET_TARGET, snippet);
      assert.ok(text.includes(body), snippet);
    }
    await put(tokens.a1!, 'dna', dna, { scope: 'personal' });
    const hit = (await search(tokens.a1!, { query: 'GATTACA' })).json().results.find((r: any) => r.uploadId === ids.dna);
    assert.match(hit.snippet, /^… (GATTACA|ATTACA|TTACA|TACA|ACA|CA|A)?(GATTACA)+/u);
  });

  test("the snippets' word scan finds the words WORD_RE finds, in any script", () => {
    const pieces = ['a', 'Z', '7', 'é', 'ß', 'Ω', '中', '٣', '𝔘', '😀', "'", '’', '-', '--', ' ', '.', ',', '\u0301', '\ud800', 'x-ray', "O'Neil's", 'co‐op', '_', '\n'];
    const random = seededRandom(42);
    const texts = ["rock'n'roll -dash- end-", '’tis the 3rd e-mail’s ‘quote’', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and 😀 emoji', ''];
    for (let i = 0; i < 300; i++) texts.push(Array.from({ length: 1 + Math.floor(random() * 30) }, () => pieces[Math.floor(random() * pieces.length)]).join(''));
    for (const text of texts) {
      const expected = [...text.matchAll(WORD_RE)].flatMap((m) => [m.index, m.index + m[0].length]);
      assert.deepEqual(wordSpans(text), expected, JSON.stringify(text));
    }
  });

  test('minScore filters rag results on their dense score only; kag and fused results stay; totalScanned counts before it', async () => {
    const loose = (await search(tokens.a1!, { query: 'Zorblax Quintavern', limit: 100, minScore: 0 })).json();
    const strict = (await search(tokens.a1!, { query: 'Zorblax Quintavern', limit: 100, minScore: 1 })).json();
    assert.ok(loose.results.some((r: any) => r.source === 'rag'), 'there are rag results to filter');
    assert.equal(strict.totalScanned, loose.totalScanned);
    assert.ok(strict.results.every((r: any) => r.source !== 'rag'));
    const keptKinds = new Set(strict.results.map((r: any) => r.source));
    assert.ok(keptKinds.has('kag') && keptKinds.has('fused'), JSON.stringify([...keptKinds]));
    // a threshold between two rag results' cosines keeps the one above it, and everything that is not rag
    const query = 'trades coast rotor blades';
    const all = (await search(tokens.a1!, { query, limit: 100, minScore: 0 })).json();
    const cosines = all.results.filter((r: any) => r.source === 'rag').map((r: any) => r.denseScore as number).sort((x: number, y: number) => x - y);
    assert.ok(all.totalScanned <= 100 && cosines.length >= 2 && cosines[0] < cosines[cosines.length - 1], JSON.stringify(all.results));
    const threshold = (cosines[0] + cosines[cosines.length - 1]) / 2;
    const mid = (await search(tokens.a1!, { query, limit: 100, minScore: threshold })).json();
    const expected = all.results.filter((r: any) => r.source !== 'rag' || r.denseScore >= threshold).map((r: any) => r.chunkId);
    assert.deepEqual(mid.results.map((r: any) => r.chunkId), expected);
    assert.ok(expected.length < all.results.length && mid.results.some((r: any) => r.source === 'rag'), 'some rag results kept, some dropped');
  });

  test('the single-method switch is for superadmins only', async () => {
    const res = await search(tokens.a1!, { query: 'guild', method: 'kag' });
    assert.equal(res.statusCode, 403);
  });
});

describe('knowledge graph maintenance', () => {
  const graphRows = async (uploadId: string) => {
    const [r] = await rowsOf<{ e: number; m: number; g: number; s: number }>(
      t.database.db,
      sql`select (select count(*)::int from kg_entities where upload_id = ${uploadId}) as e, (select count(*)::int from kg_mentions where upload_id = ${uploadId}) as m,
                 (select count(*)::int from kg_edges where upload_id = ${uploadId}) as g, (select count(*)::int from upload_index_stats where upload_id = ${uploadId}) as s`,
    );
    return r!;
  };

  /** Edits the first chunk of one of user A1's files through `app` (PUT /api/user/embedding/{chunk}). */
  const editFirstChunk = async (app: TestApp['app'], uploadId: string, text: string) => {
    const chunks = (await app.inject({ method: 'GET', url: `/api/user/files/${uploadId}/chunks`, headers: bearer(tokens.a1!) })).json().data;
    const res = await app.inject({ method: 'PUT', url: `/api/user/embedding/${chunks[0]._id}`, headers: bearer(tokens.a1!), payload: { text } });
    assert.equal(res.statusCode, 200, res.body);
  };

  test("an edited chunk's entities follow the edit", async () => {
    const id = await put(tokens.a1!, 'editable', 'Captain Mirela Ostrova sailed the Crimson Tide past Dunmore Point.', { scope: 'personal' });
    // searched once before the edit: the file's index is now held in memory (search/segments.ts)
    const found = (await search(tokens.a1!, { query: 'Mirela Ostrova' })).json();
    assert.equal(found.results[0]?.uploadId, id);
    assert.ok(found.results[0].scores.kag > 0 && found.results[0].scores.lexical > 0, JSON.stringify(found.results[0]));
    await editFirstChunk(t.app, id, 'Admiral Teodor Vashenko anchored the Silver Heron near Kelmar Bay.');
    const names = (await rowsOf<{ name: string }>(t.database.db, sql`select name from kg_entities where upload_id = ${id}`)).map((r) => r.name);
    assert.ok(names.includes('admiral teodor vashenko') && names.includes('kelmar bay'), names.join(', '));
    assert.ok(!names.includes('mirela ostrova'), names.join(', '));
    const body = (await search(tokens.a1!, { query: 'Teodor Vashenko' })).json();
    assert.equal(body.results[0]?.uploadId, id);
    assert.ok(body.results[0].scores.kag > 0);
    assert.ok(body.results[0].scores.lexical > 0);
    const gone = (await search(tokens.a1!, { query: 'Mirela Ostrova' })).json();
    assert.ok(!gone.results.some((r: any) => r.uploadId === id && (r.scores.kag !== undefined || r.scores.lexical !== undefined)), JSON.stringify(gone.results));
  });

  test('an edit made on another node is seen by the next search on this one (the copy in memory is checked by version)', async () => {
    const other = await startTestApp({ database: t.database });
    after(() => other.close());
    const id = await put(tokens.a1!, 'two-nodes', 'Navigator Ilsabet Rourke crossed the Varnel Strait in winter.', { scope: 'personal' });
    const here = (await search(tokens.a1!, { query: 'Varnel Strait' })).json();
    assert.equal(here.results[0]?.uploadId, id);
    await editFirstChunk(other.app, id, 'Cartographer Odalys Fenwick surveyed the Quillon Reef at dawn.');
    const fresh = (await search(tokens.a1!, { query: 'Quillon Reef' })).json();
    assert.equal(fresh.results[0]?.uploadId, id);
    assert.ok(fresh.results[0].scores.lexical > 0 && fresh.results[0].scores.kag > 0, JSON.stringify(fresh.results[0]));
    const stale = (await search(tokens.a1!, { query: 'Varnel Strait' })).json();
    assert.ok(!stale.results.some((r: any) => r.uploadId === id && (r.scores.kag !== undefined || r.scores.lexical !== undefined)), JSON.stringify(stale.results));
  });

  test('graph rows disappear with their file', async () => {
    const id = await put(tokens.a1!, 'doomed', 'Professor Hallvard Brekke studied the Oslo Fjord tides with NOAA instruments.', { scope: 'personal' });
    const before = await graphRows(id);
    assert.ok(before.e > 0 && before.m > 0 && before.g > 0 && before.s === 1, JSON.stringify(before));
    assert.ok(uploadIdsOf((await search(tokens.a1!, { query: 'Hallvard Brekke' })).json()).has(id));
    const res = await t.app.inject({ method: 'DELETE', url: `/api/user/files/${id}`, headers: bearer(tokens.a1!) });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(await graphRows(id), { e: 0, m: 0, g: 0, s: 0 });
    const body = (await search(tokens.a1!, { query: 'Hallvard Brekke' })).json();
    assert.ok(!uploadIdsOf(body).has(id));

    // the row deleted outright (what the cascade from its owner or account does): its graph rows go with it
    const other = await put(tokens.a1!, 'cascaded', 'Doctor Ingrid Solvang charted the Bergen Strait with NASA buoys.', { scope: 'personal' });
    const held = await graphRows(other);
    assert.ok(held.e > 0 && held.g > 0, JSON.stringify(held));
    await t.database.db.execute(sql`delete from uploads where id = ${other}`);
    assert.deepEqual(await graphRows(other), { e: 0, m: 0, g: 0, s: 0 });
  });
});

describe('the scope held between searches (search/scopes.ts)', () => {
  test('a change another node makes to the scope is in the very next search here: a file added, made private, made inactive', async () => {
    // another node on the same database and the same file storage (either node's ingestion may take the file)
    const other = await startTestApp({ database: t.database, dataDir: t.dataDir });
    after(() => other.close());
    const stats = t.app.ctx.searchScopes.stats;
    const query = { query: 'Thessaly Marrowind harbour lanterns' };
    // this node holds the scope from the first search; the second ranks over it and its statement confirms it
    await search(tokens.a1!, query);
    const start = { ...stats };
    const held = (await search(tokens.a1!, query)).json();
    assert.deepEqual(stats, { ...start, confirmed: start.confirmed + 1 });

    const patch = async (id: string, body: Record<string, unknown>) => {
      const res = await other.app.inject({ method: 'PATCH', url: `/api/user/files/${id}`, headers: bearer(tokens.a1admin!), payload: body });
      assert.equal(res.statusCode, 200, res.body);
    };
    const step = async (expectIn: boolean, uploadCount: number, stale: number) => {
      const body = (await search(tokens.a1!, query)).json();
      assert.equal(uploadIdsOf(body).has(id), expectIn, JSON.stringify(body.results.map((r: any) => r.upload.originalname)));
      assert.equal(body.uploadCount, uploadCount);
      // the held scope was not the scope any more: the search ranked again over the one it read
      assert.equal(stats.stale, start.stale + stale);
    };
    // added on the other node (ingested by either node's pipeline): found here at once
    const u = await uploadOk(other.app, tokens.a1admin!, { name: 'marrowind.txt', content: 'Thessaly Marrowind lit the harbour lanterns of Qorvath at dusk.', type: 'text/plain' }, { scope: 'instance' });
    const id = u._id as string;
    const done = await waitForIngestion(other.app, tokens.a1admin!, id);
    assert.equal(done.status, 'active', JSON.stringify(done));
    await step(true, held.uploadCount + 1, 1);
    // made private by its owner there: gone here (its index is still held in memory: the scope decides)
    await patch(id, { is_private: true });
    await step(false, held.uploadCount, 2);
    await patch(id, { is_private: false });
    await step(true, held.uploadCount + 1, 3);
    // made inactive there: gone here
    await patch(id, { status: 'inactive' });
    await step(false, held.uploadCount, 4);
    // nothing changed since: the held scope is confirmed again
    await step(false, held.uploadCount, 4);
    assert.equal(stats.confirmed, start.confirmed + 2);
  });
});

describe('the result files held between searches (search/scopes.ts, UploadRowCache)', () => {
  test('a file renamed or made confidential on another node is presented as it now is in the very next search here', async () => {
    const other = await startTestApp({ database: t.database });
    after(() => other.close());
    const stats = t.app.ctx.searchUploadRows.stats;
    const id = await put(tokens.a1admin!, 'ledger', 'Quartermaster Ysolde Brannick audited the Harrowgate grain ledger.', { scope: 'instance' });
    const query = { query: 'Ysolde Brannick Harrowgate ledger' };
    const find = async () => {
      const body = (await search(tokens.a1!, query)).json();
      const hit = body.results.find((r: any) => r.uploadId === id);
      assert.ok(hit, JSON.stringify(body.results));
      return { hit, files: new Set(body.results.map((r: any) => r.uploadId)).size };
    };
    await find();
    // the same search again: every result's file is held at the version the scope statement read, none is read
    const start = { ...stats };
    const again = await find();
    assert.deepEqual(stats, { held: start.held + again.files, read: start.read });
    assert.match(again.hit.snippet, /Brannick/);

    const patch = async (body: Record<string, unknown>) => {
      const res = await other.app.inject({ method: 'PATCH', url: `/api/user/files/${id}`, headers: bearer(tokens.a1admin!), payload: body });
      assert.equal(res.statusCode, 200, res.body);
    };
    await patch({ confidential: true, file_title: 'Sealed ledger' });
    const sealed = await find();
    assert.equal(sealed.hit.snippet, '[confidential]');
    assert.equal(sealed.hit.upload.confidential, true);
    assert.equal(sealed.hit.upload.file_title, 'Sealed ledger');
    // that file only was read again
    assert.equal(stats.read, start.read + 1);
    await patch({ confidential: false });
    const open = await find();
    assert.match(open.hit.snippet, /Brannick/);
    assert.equal(open.hit.upload.confidential, false);
    assert.equal(stats.read, start.read + 2);
  });
});

describe('text without letters or digits (the zero vector: no cosine)', () => {
  test('such a query, and searches over a file of such text, answer 200 without a dense score for it', async () => {
    for (const query of ['!!!', '...', '<->', '" "', '( = + -']) {
      const res = await search(tokens.a1!, { query });
      assert.equal(res.statusCode, 200, `${query}: ${res.body}`);
      for (const r of res.json().results) assert.equal(r.denseScore, null);
    }
    // a member puts such a file in the institution: everyone's searches there still work
    const id = await put(tokens.a1admin!, 'punctuation', '!!! ??? ... --- *** ### !!! ???', { scope: 'instance' });
    try {
      for (const payload of [{ query: 'Hemlock Guild' }, { query: 'wind turbines', minScore: 0.05 }, { query: '!!!' }, { query: '??? ###', limit: 100 }]) {
        const res = await search(tokens.a1!, payload);
        assert.equal(res.statusCode, 200, `${JSON.stringify(payload)}: ${res.body}`);
        for (const r of res.json().results) assert.ok(r.denseScore === null || Number.isFinite(r.denseScore));
      }
      const guild = (await search(tokens.a1!, { query: 'Hemlock Guild' })).json();
      assert.ok(uploadIdsOf(guild).has(ids.guild!));
      assert.ok(!uploadIdsOf(guild).has(id));
    } finally {
      const res = await t.app.inject({ method: 'DELETE', url: `/api/user/files/${id}`, headers: bearer(tokens.a1admin!) });
      assert.equal(res.statusCode, 200, res.body);
    }
  });

  test('a query is measured in characters: 500 emoji are accepted, 501 are not', async () => {
    assert.equal((await search(tokens.a1!, { query: '😀'.repeat(500) })).statusCode, 200);
    const over = await search(tokens.a1!, { query: '😀'.repeat(501) });
    assert.equal(over.statusCode, 400, over.body);
    assert.equal(over.json().error.code, 'VALIDATION_FAILED');
  });
});

describe('rate limit', () => {
  test('the 21st request within a minute is a 429 with Retry-After for that user only', async () => {
    const limited = await startTestApp({ database: t.database });
    after(() => limited.close());
    const send = (token: string) =>
      limited.app.inject({ method: 'POST', url: '/api/user/files/search-content', headers: bearer(token), payload: { query: 'turbines' } });
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const token = (await login(limited.app, user.email)).accessToken;
    for (let i = 1; i <= 20; i++) {
      const res = await send(token);
      assert.equal(res.statusCode, 200, `request ${i}: ${res.body}`);
    }
    const refused = await send(token);
    assert.equal(refused.statusCode, 429);
    assert.equal(refused.json().error.code, 'RATE_LIMITED');
    assert.ok(Number(refused.headers['retry-after']) > 0);
    const other = await send(tokens.a2!);
    assert.equal(other.statusCode, 200);
  });

  test('requests the route refuses (400, 403) do not use up the limit', async () => {
    const limited = await startTestApp({ database: t.database });
    after(() => limited.close());
    const send = (token: string, payload: Record<string, unknown>) =>
      limited.app.inject({ method: 'POST', url: '/api/user/files/search-content', headers: bearer(token), payload });
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const token = (await login(limited.app, user.email)).accessToken;
    for (let i = 1; i <= 25; i++) {
      const blank = await send(token, { query: '   ' });
      assert.equal(blank.statusCode, 400, `blank ${i}: ${blank.body}`);
      const tooLong = await send(token, { query: 'x'.repeat(501) });
      assert.equal(tooLong.statusCode, 400, `too long ${i}: ${tooLong.body}`);
      const method = await send(token, { query: 'turbines', method: 'dense' });
      assert.equal(method.statusCode, 403, `method ${i}: ${method.body}`);
    }
    for (let i = 1; i <= 20; i++) assert.equal((await send(token, { query: 'turbines' })).statusCode, 200, `request ${i}`);
    assert.equal((await send(token, { query: 'turbines' })).statusCode, 429);
  });
});

describe('the indexes in memory', () => {
  test("a new file's index is read into memory after its ingestion, before any search of it", async () => {
    const id = await put(tokens.a1!, 'warmed', 'The basilisk lizard runs across water on its hind legs to escape its predators.', { scope: 'personal' });
    const [stats] = await rowsOf<{ version: number | string }>(t.database.db, sql`select version from upload_index_stats where upload_id = ${id}`);
    const index = t.app.ctx.searchIndex;
    const deadline = Date.now() + 10_000;
    while (!index.holdsVersion(id, Number(stats!.version)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.ok(index.holdsVersion(id, Number(stats!.version)), 'read into memory in the background');
    const loads = index.loads;
    const res = await search(tokens.a1!, { query: 'basilisk lizard', selectedUploadIds: [id] });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().results[0].uploadId, id);
    assert.equal(index.loads, loads, 'the search read no index');
  });
});
