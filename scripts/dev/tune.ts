// dev harness: rank lists on an eval data dir, time components, score fusion variants (not shipped as a command)
import { openDatabase } from '../../src/db/client.js';
import { LocalEmbedder } from '../../src/providers/embeddings/index.js';
import { rankLists } from '../../src/modules/search/retrieve.js';
import { fuse } from '../../src/modules/search/fusion.js';
import { loadCollection, ndcgAt } from '../eval-search.js';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../../src/db/client.js';
const database = await openDatabase({ pgliteDataDir: '/tmp/evalcran/pgdata' });
const db = database.db;
const [u] = await rowsOf<any>(db, sql`select id, account_id from users limit 1`);
const auth: any = { userId: u.id, accountId: u.account_id, role: 'superadmin', memberships: new Map(), institutionId: null, sessionId: 'x', email: 'x', user: {} };
const ctx: any = { db, providers: { embedder: new LocalEmbedder(384) } };
const col = loadCollection('/work/shared/datasets/cranfield');
const ups = await rowsOf<any>(db, sql`select u.id, u.originalname from uploads u`);
const chunkDoc = new Map<string, string>();
const cr = await rowsOf<any>(db, sql`select c.id, u.originalname from chunks c join uploads u on u.id = c.upload_id`);
for (const c of cr) chunkDoc.set(c.id, /^doc-(.+)\.txt$/.exec(c.originalname)![1]!);
void ups;
const n = Number(process.argv[2] ?? 60);
const qs = col.queries.slice(0, n);
const res: Record<string, number[]> = {};
const add = (k: string, v: number) => (res[k] ??= []).push(v);
const docs = (list: { id: string }[]) => { const out: string[] = []; for (const r of list) { const d = chunkDoc.get(r.id)!; if (!out.includes(d)) out.push(d); } return out; };
const t0 = performance.now();
for (const q of qs) {
  const rel = col.qrels.get(q.key) ?? new Map();
  const { lists } = await rankLists(ctx, auth, q.text, { limit: 30 });
  for (const m of ['dense', 'lexical', 'kag'] as const) add(m, ndcgAt(docs(lists[m] ?? []), rel));
  add('fused', ndcgAt(docs(fuse(lists)), rel));
  add('lex+kag', ndcgAt(docs(fuse({ lexical: lists.lexical, kag: lists.kag })), rel));
}
console.log(`${qs.length} queries ${((performance.now() - t0) / qs.length).toFixed(1)} ms/query`);
for (const [k, v] of Object.entries(res)) console.log(k.padEnd(10), (v.reduce((a, b) => a + b, 0) / v.length).toFixed(4));
await database.close();
