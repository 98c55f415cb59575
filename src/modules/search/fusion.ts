/**
 * Fusion of the three ranked lists (dense, lexical, knowledge graph) into one score in 0..1.
 *
 * Formula (chosen by evaluation, see README "Content search"): an evidence-weighted CombSUM.
 * 1. Each list's scores are divided by the list's best score (0..1 within the query).
 * 2. Each list gets a weight from the evidence of THIS query: how much of its top TOP agrees with the
 *    other lists' candidates (a query-performance predictor by consensus). A side that retrieves
 *    noise (a weak embedder, a graph with no matching entity) finds no support and fades out,
 *    whatever the corpus; no per-collection constant.
 * 3. fused(d) = Σ_m w_m · norm_m(d) / Σ_m w_m.
 */
export type Method = 'dense' | 'lexical' | 'kag';
export const METHODS: readonly Method[] = ['dense', 'lexical', 'kag'];

export interface Ranked {
  id: string;
  score: number;
}

export interface Fused {
  id: string;
  score: number;
  /** normalised score per method that found it */
  by: Partial<Record<Method, number>>;
}

/** Size of the head of a list whose agreement with the other lists is measured. */
export const TOP = 10;

export function weights(lists: Partial<Record<Method, Ranked[]>>): Partial<Record<Method, number>> {
  const present = METHODS.filter((m) => (lists[m]?.length ?? 0) > 0);
  const out: Partial<Record<Method, number>> = {};
  if (present.length === 1) {
    out[present[0]!] = 1;
    return out;
  }
  for (const m of present) {
    const others = new Set<string>();
    for (const o of present) if (o !== m) for (const r of lists[o]!) others.add(r.id);
    const head = lists[m]!.slice(0, TOP);
    const agree = head.filter((r) => others.has(r.id)).length / head.length;
    out[m] = agree;
  }
  // no list agrees with any other: nothing to tell them apart, weigh them equally
  if (present.every((m) => out[m] === 0)) for (const m of present) out[m] = 1;
  return out;
}

export function fuse(lists: Partial<Record<Method, Ranked[]>>): Fused[] {
  const w = weights(lists);
  const total = METHODS.reduce((s, m) => s + (w[m] ?? 0), 0);
  const acc = new Map<string, Fused>();
  for (const m of METHODS) {
    const list = lists[m];
    if (!list || list.length === 0) continue;
    const max = Math.max(...list.map((r) => r.score));
    for (const r of list) {
      const norm = max > 0 ? Math.max(0, r.score) / max : 0;
      const f = acc.get(r.id) ?? { id: r.id, score: 0, by: {} };
      f.by[m] = norm;
      f.score += ((w[m] ?? 0) * norm) / (total || 1);
      acc.set(r.id, f);
    }
  }
  return [...acc.values()].sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1));
}
