import { readFileSync } from 'node:fs';
import { fuse, type Method, type Ranked } from '../../src/modules/search/fusion.js';
import { loadCollection, ndcgAt, recallAt } from '../eval-search.js';
import { sql } from 'drizzle-orm';
const col = loadCollection('/work/shared/datasets/cranfield');
const cache = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Array<{ key: string; lists: Partial<Record<Method, Ranked[]>> }>;
const chunkDoc = new Map<string, string>(JSON.parse(readFileSync('/tmp/chunkdoc.json', 'utf8')));
const docs = (list: { id: string }[]) => { const out: string[] = []; for (const r of list) { const d = chunkDoc.get(r.id)!; if (!out.includes(d)) out.push(d); } return out; };
type F = (l: Partial<Record<Method, Ranked[]>>) => { id: string }[];
const rrf = (w: Partial<Record<Method, number>>): F => (lists) => { const acc = new Map<string, number>(); for (const m of Object.keys(lists) as Method[]) (lists[m] ?? []).forEach((r, i) => acc.set(r.id, (acc.get(r.id) ?? 0) + (w[m] ?? 1) / (60 + i + 1))); return [...acc.entries()].sort((a, b) => b[1] - a[1]).map(([id]) => ({ id })); };
const combsum = (w: Partial<Record<Method, number>>): F => (lists) => { const acc = new Map<string, number>(); for (const m of Object.keys(lists) as Method[]) { const l = lists[m] ?? []; const mx = Math.max(...l.map((r) => r.score), 1e-9); for (const r of l) acc.set(r.id, (acc.get(r.id) ?? 0) + (w[m] ?? 1) * r.score / mx); } return [...acc.entries()].sort((a, b) => b[1] - a[1]).map(([id]) => ({ id })); };
const variants: Record<string, F> = {
  dense: (l) => l.dense ?? [], lexical: (l) => l.lexical ?? [], kag: (l) => l.kag ?? [],
  fused: (l) => fuse(l),
  'rrf-equal': rrf({}), 'combsum-equal': combsum({}),
  'lex+kag fused': (l) => fuse({ lexical: l.lexical, kag: l.kag }),
  'lex+dense fused': (l) => fuse({ lexical: l.lexical, dense: l.dense }),
};
for (const [name, f] of Object.entries(variants)) {
  let n = 0, r = 0;
  for (const q of cache) { const rel = col.qrels.get(q.key) ?? new Map(); const d = docs(f(q.lists)); n += ndcgAt(d, rel); r += recallAt(d, rel); }
  console.log(name.padEnd(18), (n / cache.length).toFixed(4), (r / cache.length).toFixed(4));
}
void sql;
