/**
 * Retrieval quality of content search on a labelled collection in the SMART layout:
 *   npm run eval:search -- <collection dir> [--max-queries N] [--data <dir>] [--methods dense,lexical,kag,fused]
 *
 * Starts the real service on a fresh data directory (or reuses --data <dir> when it already holds the
 * collection), uploads every document as a .txt file through POST /api/user/files, waits for ingestion,
 * sends every query to POST /api/user/files/search-content as a user would (one request per method:
 * `method` is the superadmin-only evaluation switch), and prints nDCG@10 and recall@10 per method,
 * beside a plain BM25 (k1 1.2, b 0.75, lower-cased alphanumeric tokens, no stemming) computed here.
 *
 * Collection files (found by name in the directory, case aside): documents `*.all*` (cran.all.1400, MED.ALL,
 * CISI.ALL, cacm.all: .I/.T/.W records; .T and .W are indexed), queries `*.qry*` or `query*` (cran.qry, MED.QRY,
 * CACM's query.text: the .W text, else the .T), judgements `*qrel*` or `*.rel` (cranqrel, MED.REL, qrels.text).
 * Files are read as UTF-8, or as Latin-1 when they are not valid UTF-8. Judgement lines are
 * `<query> <doc> [<code> ...]` (Cranfield codes 1..4: gain 5 - code; -1 or 0 with only 0s: binary; CISI's and
 * CACM's extra columns ignored) or TREC `<query> 0 <doc> <grade>`. Numeric ids are compared without leading
 * zeros (CACM's qrels say `01` for query 1). Query numbers are positions in the query file when the ids skip
 * numbers and every judged query number is a valid position (Cranfield), else the .I ids.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startProcess, stopProcess } from '../bench/support.js';

interface Rec {
  id: string;
  fields: Record<string, string>;
}

export function parseSmart(text: string): Rec[] {
  const out: Rec[] = [];
  let cur: Rec | undefined;
  let field = '';
  for (const line of text.split(/\r?\n/)) {
    const m = /^\.([A-Z])(?:\s+(.*))?$/.exec(line);
    if (m && m[1] === 'I') {
      cur = { id: (m[2] ?? '').trim(), fields: {} };
      out.push(cur);
      field = '';
    } else if (m) {
      field = m[1]!;
      if (cur) cur.fields[field] = (cur.fields[field] ?? '') + (m[2] ? `${m[2]}\n` : '');
    } else if (cur && field) cur.fields[field] = (cur.fields[field] ?? '') + `${line}\n`;
  }
  return out;
}

function findFile(dir: string, what: string, test: (name: string) => boolean): string {
  const name = readdirSync(dir).find((n) => test(n.toLowerCase()));
  if (!name) throw new Error(`no ${what} file in ${dir}`);
  return join(dir, name);
}

/** A collection file's text: UTF-8 when it is valid UTF-8, else Latin-1 (the older collections). */
function readText(path: string): string {
  const bytes = readFileSync(path);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return bytes.toString('latin1');
  }
}

/** An id as judgements and records are matched by: a number without its leading zeros, anything else as it is. */
const idOf = (raw: string) => (/^\d+$/.test(raw) ? String(Number(raw)) : raw);

export function loadCollection(dir: string) {
  const docs = parseSmart(readText(findFile(dir, 'documents (*.all*)', (n) => n.includes('.all'))))
    .map((r) => ({ id: idOf(r.id), text: [r.fields.T, r.fields.W].filter(Boolean).join('\n').trim() }))
    .filter((d) => d.text.length > 0);
  const queries = parseSmart(readText(findFile(dir, 'queries (*.qry*, query*)', (n) => n.includes('.qry') || n.startsWith('query'))))
    .map((r, i) => ({ id: idOf(r.id), pos: String(i + 1), text: (r.fields.W ?? r.fields.T ?? '').replace(/\s+/g, ' ').trim() }));
  const qrelLines = readText(findFile(dir, 'judgements (*qrel*, *.rel)', (n) => (n.includes('qrel') && !n.includes('readme')) || n.endsWith('.rel')))
    .split(/\r?\n/)
    .map((l) => l.trim().split(/\s+/))
    .filter((p) => p.length >= 2 && p[0] !== '');
  const trec = qrelLines.every((p) => p.length === 4 && p[1] === '0');
  const raw: Array<{ q: string; d: string; code: number }> = qrelLines.map((p) =>
    trec ? { q: idOf(p[0]!), d: idOf(p[2]!), code: Number(p[3]) } : { q: idOf(p[0]!), d: idOf(p[1]!), code: p.length >= 3 ? Number(p[2]) : 1 },
  );
  const cleverdon = !trec && raw.some((r) => r.code >= 1 && r.code <= 4) && raw.every((r) => r.code <= 4);
  const gainOf = (code: number) => (trec ? Math.max(0, code) : cleverdon ? (code >= 1 && code <= 4 ? 5 - code : 0) : code === -1 ? 0 : 1);
  const idsArePositions = queries.every((q) => q.id === q.pos);
  const maxQ = Math.max(...raw.map((r) => Number(r.q)));
  const byPosition = !idsArePositions && maxQ <= queries.length;
  const qrels = new Map<string, Map<string, number>>();
  for (const r of raw) {
    const g = gainOf(r.code);
    if (g <= 0) continue;
    if (!qrels.has(r.q)) qrels.set(r.q, new Map());
    qrels.get(r.q)!.set(r.d, Math.max(g, qrels.get(r.q)!.get(r.d) ?? 0));
  }
  const keyOf = (q: { id: string; pos: string }) => (byPosition || idsArePositions ? q.pos : q.id);
  return { docs, queries: queries.map((q) => ({ ...q, key: keyOf(q) })), qrels, byPosition };
}

/** nDCG@k with linear gains (trec_eval's convention): DCG = Σ gain_i / log2(i + 1), i from 1. */
export function ndcgAt(ranked: string[], rel: Map<string, number>, k = 10): number {
  let dcg = 0;
  ranked.slice(0, k).forEach((d, i) => {
    dcg += (rel.get(d) ?? 0) / Math.log2(i + 2);
  });
  const ideal = [...rel.values()].sort((a, b) => b - a).slice(0, k);
  const idcg = ideal.reduce((s, g, i) => s + g / Math.log2(i + 2), 0);
  return idcg > 0 ? dcg / idcg : 0;
}

export function recallAt(ranked: string[], rel: Map<string, number>, k = 10): number {
  if (rel.size === 0) return 0;
  return ranked.slice(0, k).filter((d) => rel.has(d)).length / rel.size;
}

const tokenize = (t: string) => t.toLowerCase().match(/[a-z0-9]+/g) ?? [];

/** Plain BM25 reference (k1 1.2, b 0.75, no stemming, no stop words). */
export function bm25Reference(docs: Array<{ id: string; text: string }>) {
  const tfs = docs.map((d) => {
    const m = new Map<string, number>();
    for (const t of tokenize(d.text)) m.set(t, (m.get(t) ?? 0) + 1);
    return { id: d.id, m, len: tokenize(d.text).length };
  });
  const df = new Map<string, number>();
  for (const d of tfs) for (const t of d.m.keys()) df.set(t, (df.get(t) ?? 0) + 1);
  const n = tfs.length;
  const avg = tfs.reduce((s, d) => s + d.len, 0) / n;
  return (query: string): string[] => {
    const scores = tfs.map((d) => {
      let s = 0;
      for (const t of tokenize(query)) {
        const tf = d.m.get(t);
        if (!tf) continue;
        const f = df.get(t)!;
        s += Math.log(1 + (n - f + 0.5) / (f + 0.5)) * ((tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * d.len) / avg)));
      }
      return { id: d.id, s };
    });
    return scores.filter((x) => x.s > 0).sort((a, b) => b.s - a.s).slice(0, 10).map((x) => x.id);
  };
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function main() {
  const dir = process.argv.slice(2).find((a, i, all) => !a.startsWith('--') && !(i > 0 && all[i - 1]!.startsWith('--')));
  if (!dir) throw new Error('usage: npm run eval:search -- <collection dir> [--max-queries N] [--data <dir>] [--methods dense,lexical,kag,fused]');
  const col = loadCollection(dir);
  const maxQueries = Number(arg('--max-queries') ?? col.queries.length);
  const methods = (arg('--methods') ?? 'dense,lexical,kag,fused').split(',');
  const keep = arg('--data');
  const dataDir = keep ?? mkdtempSync(join(tmpdir(), 'eval-search-'));
  if (keep && !existsSync(keep)) mkdirSync(keep, { recursive: true });
  const port = await freePort();
  const email = 'eval@example.com';
  const password = 'eval-password-123';
  console.log(`collection: ${col.docs.length} documents, ${col.queries.length} queries (${col.qrels.size} judged; query numbers ${col.byPosition ? 'are positions' : 'are ids'})`);
  const started = performance.now();
  const { child } = await startProcess(
    ['src/cli.ts', 'serve'],
    {
      NODE_ENV: 'development',
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'info',
      BOOTSTRAP_ADMIN_EMAIL: email,
      BOOTSTRAP_ADMIN_PASSWORD: password,
      SEARCH_RATE_LIMIT_PER_MINUTE: '100000',
      UPLOAD_RATE_LIMIT_PER_MINUTE: '100000',
      // every document is a personal file of the one evaluation user: the quota must hold the collection
      PERSONAL_MAX_FILES: String(Math.max(1000, col.docs.length)),
    },
    /server ready/,
    120_000,
  );
  const base = `http://127.0.0.1:${port}`;
  try {
    // access tokens live 15 minutes: log in again before each method
    const auth: Record<string, string> = {};
    const signIn = async () => {
      const login = (await (await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) })).json()) as { accessToken: string };
      auth.authorization = `Bearer ${login.accessToken}`;
    };
    await signIn();
    // documents already there (a reused --data directory): by file name
    const docOfUpload = new Map<string, string>();
    const existing = new Set<string>();
    for (let page = 1; ; page++) {
      const list = (await (await fetch(`${base}/api/user/files?page=${page}&pageSize=1000`, { headers: auth })).json()) as { data: Array<{ _id: string; originalname: string; status: string }>; hasMore: boolean };
      for (const u of list.data) {
        const m = /^doc-(.+)\.txt$/.exec(u.originalname);
        if (m) {
          docOfUpload.set(u._id, m[1]!);
          existing.add(m[1]!);
        }
      }
      if (!list.hasMore) break;
    }
    const t0 = performance.now();
    let sent = 0;
    for (const d of col.docs) {
      if (existing.has(d.id)) continue;
      const form = new FormData();
      form.append('scope', 'personal');
      form.append('file', new Blob([d.text], { type: 'text/plain' }), `doc-${d.id}.txt`);
      const res = await fetch(`${base}/api/user/files`, { method: 'POST', headers: auth, body: form });
      if (res.status !== 201) throw new Error(`upload of ${d.id}: ${res.status} ${await res.text()}`);
      const body = (await res.json()) as { data: { _id: string } };
      docOfUpload.set(body.data._id, d.id);
      sent++;
    }
    // wait until nothing is processing (a document whose ingestion failed counts as found by no method)
    const count = async (status: string) => ((await (await fetch(`${base}/api/user/files?status=${status}&pageSize=1`, { headers: auth })).json()) as { total: number }).total;
    for (;;) {
      if ((await count('processing')) === 0) break;
      await new Promise((r) => setTimeout(r, 1000));
      if (performance.now() - t0 > 30 * 60_000) throw new Error('ingestion did not finish in 30 minutes');
    }
    const failed = await count('error');
    console.log(
      `uploaded ${sent} documents and ingested ${col.docs.length - failed} of ${col.docs.length} in ${((performance.now() - t0) / 1000).toFixed(1)} s` +
        (failed > 0 ? ` (${failed} ended in error: GET /api/user/files?status=error says why; they count as found by no method)` : ''),
    );

    const ref = bm25Reference(col.docs);
    const queries = col.queries.filter((q) => q.text).slice(0, maxQueries);
    const table: Array<{ method: string; ndcg: number; recall: number; ms: number }> = [];
    const refScores = queries.map((q) => {
      const rel = col.qrels.get(q.key) ?? new Map();
      const ranked = ref(q.text);
      return { n: ndcgAt(ranked, rel), r: recallAt(ranked, rel) };
    });
    table.push({ method: 'BM25 reference (no stemming)', ndcg: avg(refScores.map((s) => s.n)), recall: avg(refScores.map((s) => s.r)), ms: 0 });
    console.log(`${'BM25 reference (no stemming)'.padEnd(32)}${table[0]!.ndcg.toFixed(4)}   ${table[0]!.recall.toFixed(4)}`);
    for (const method of methods) {
      await signIn();
      const n: number[] = [];
      const r: number[] = [];
      const ms: number[] = [];
      for (const q of queries) {
        const send = () =>
          fetch(`${base}/api/user/files/search-content`, {
            method: 'POST',
            headers: { ...auth, 'content-type': 'application/json' },
            body: JSON.stringify({ query: q.text.slice(0, 500), limit: 30, method }),
          });
        let res = await send();
        if (res.status === 401) {
          await signIn(); // the access token expired during a long run
          res = await send();
        }
        if (res.status !== 200) throw new Error(`query ${q.id} (${method}): ${res.status} ${await res.text()}`);
        const body = (await res.json()) as { results: Array<{ uploadId: string }>; tookMs: number };
        const ranked: string[] = [];
        for (const hit of body.results) {
          const d = docOfUpload.get(hit.uploadId);
          if (d && !ranked.includes(d)) ranked.push(d);
        }
        const rel = col.qrels.get(q.key) ?? new Map();
        n.push(ndcgAt(ranked, rel));
        r.push(recallAt(ranked, rel));
        ms.push(body.tookMs);
      }
      table.push({ method, ndcg: avg(n), recall: avg(r), ms: avg(ms) });
      console.log(`${method.padEnd(32)}${avg(n).toFixed(4)}   ${avg(r).toFixed(4)}     ${avg(ms).toFixed(1)}`);
    }
    console.log(`\n${queries.length} queries; nDCG@10 (linear graded gains), recall@10; server-side mean ms per query`);
    console.log('method                          nDCG@10  recall@10  ms');
    for (const t of table) console.log(`${t.method.padEnd(32)}${t.ndcg.toFixed(4)}   ${t.recall.toFixed(4)}     ${t.ms ? t.ms.toFixed(1) : '-'}`);
    console.log(`\ntotal ${((performance.now() - started) / 1000).toFixed(1)} s`);
  } finally {
    await stopProcess(child);
    if (!keep) rmSync(dataDir, { recursive: true, force: true });
  }
}

const avg = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
