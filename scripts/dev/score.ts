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
// more variants
const norm = (l: Ranked[] = []) => { const mx = Math.max(...l.map((r) => r.score), 1e-9); return new Map(l.map((r) => [r.id, r.score / mx])); };
const zn = (l: Ranked[] = []) => { if (!l.length) return new Map<string, number>(); const m = l.reduce((s, r) => s + r.score, 0) / l.length; const sd = Math.sqrt(l.reduce((s, r) => s + (r.score - m) ** 2, 0) / l.length) || 1; return new Map(l.map((r) => [r.id, (r.score - m) / sd])); };
const mk = (f: (l: Partial<Record<Method, Ranked[]>>) => Map<string, number>): F => (l) => [...f(l).entries()].sort((a, b) => b[1] - a[1]).map(([id]) => ({ id }));
const more: Record<string, F> = {};
for (const wd of [0.1, 0.2, 0.3]) for (const wk of [0.1, 0.2, 0.3, 0.5]) more[`lex+${wd}d+${wk}k`] = mk((l) => { const a = norm(l.lexical), d = norm(l.dense), k = norm(l.kag); const out = new Map<string, number>(); for (const id of new Set([...a.keys(), ...d.keys(), ...k.keys()])) out.set(id, (a.get(id) ?? 0) + wd * (d.get(id) ?? 0) + wk * (k.get(id) ?? 0)); return out; });
more['z-sum'] = mk((l) => { const a = zn(l.lexical), d = zn(l.dense), k = zn(l.kag); const out = new Map<string, number>(); for (const id of new Set([...a.keys(), ...d.keys(), ...k.keys()])) out.set(id, (a.get(id) ?? -2) + (d.get(id) ?? -2) + (k.get(id) ?? -2)); return out; });
for (const [name, f] of Object.entries(more)) {
  let n = 0;
  for (const q of cache) { const rel = col.qrels.get(q.key) ?? new Map(); n += ndcgAt(docs(f(q.lists)), rel); }
  console.log(name.padEnd(18), (n / cache.length).toFixed(4));
}
const disp = (K: number, mode: string): F => mk((l) => {
  const out = new Map<string, number>();
  for (const m of ['lexical', 'dense', 'kag'] as Method[]) {
    const list = l[m] ?? []; if (!list.length) continue;
    const n = norm(list);
    const head = list.slice(0, K).map((r) => n.get(r.id)!);
    const mean = head.reduce((s, x) => s + x, 0) / head.length;
    let w = 1 - mean;
    if (mode === 'sq') w = w * w;
    for (const [id, v] of n) out.set(id, (out.get(id) ?? 0) + w * v);
  }
  return out;
});
for (const K of [10, 20, 50]) for (const mode of ['lin', 'sq']) {
  const f = disp(K, mode); let n = 0; const w: Record<string, number[]> = {};
  for (const q of cache) { const rel = col.qrels.get(q.key) ?? new Map(); n += ndcgAt(docs(f(q.lists)), rel); }
  console.log(`disp K=${K} ${mode}`.padEnd(18), (n / cache.length).toFixed(4));
}
{ // average weights per method
  for (const m of ['lexical', 'dense', 'kag'] as Method[]) { let s = 0, c = 0; for (const q of cache) { const list = q.lists[m] ?? []; if (!list.length) continue; const n = norm(list); const head = list.slice(0, 20).map((r) => n.get(r.id)!); s += 1 - head.reduce((a, x) => a + x, 0) / head.length; c++; } console.log('mean w', m, (s / c).toFixed(3), c); }
}
const agreeW = (pow: number, ref: 'lex' | 'all'): F => mk((l) => {
  const out = new Map<string, number>();
  const present = (['lexical', 'dense', 'kag'] as Method[]).filter((m) => (l[m] ?? []).length);
  for (const m of present) {
    const others = new Set<string>();
    for (const o of present) if (o !== m && (ref === 'all' || o === 'lexical' || m === 'lexical')) for (const r of (l[o] ?? []).slice(0, 10)) others.add(r.id);
    const head = l[m]!.slice(0, 10);
    const a = present.length === 1 ? 1 : head.filter((r) => others.has(r.id)).length / head.length;
    const w = Math.pow(a, pow);
    for (const [id, v] of norm(l[m])) out.set(id, (out.get(id) ?? 0) + w * v);
  }
  return out;
});
for (const pow of [1, 2, 3]) for (const ref of ['lex', 'all'] as const) {
  const f = agreeW(pow, ref); let n = 0;
  for (const q of cache) { const rel = col.qrels.get(q.key) ?? new Map(); n += ndcgAt(docs(f(q.lists)), rel); }
  console.log(`agree10 p${pow} ${ref}`.padEnd(18), (n / cache.length).toFixed(4));
}
const anchored = (pow: number, scale: number): F => mk((l) => {
  const out = new Map<string, number>();
  const lexHead = new Set((l.lexical ?? []).slice(0, 10).map((r) => r.id));
  for (const [id, v] of norm(l.lexical)) out.set(id, v);
  for (const m of ['dense', 'kag'] as Method[]) {
    const list = l[m] ?? []; if (!list.length) continue;
    const a = lexHead.size ? list.slice(0, 10).filter((r) => lexHead.has(r.id)).length / Math.min(10, list.length) : 1;
    const w = scale * Math.pow(a, pow);
    for (const [id, v] of norm(list)) out.set(id, (out.get(id) ?? 0) + w * v);
  }
  return out;
});
for (const pow of [0, 0.5, 1]) for (const scale of [0.25, 0.5, 1 / 3]) {
  const f = anchored(pow, scale); let n = 0;
  for (const q of cache) { const rel = col.qrels.get(q.key) ?? new Map(); n += ndcgAt(docs(f(q.lists)), rel); }
  console.log(`anch p${pow} s${scale.toFixed(2)}`.padEnd(18), (n / cache.length).toFixed(4));
}
