/**
 * Fusion of the three ranked lists (dense, lexical, knowledge graph) into one score in 0..1.
 *
 * Formula: a lexically anchored, evidence-weighted CombSUM (chosen by evaluation; README "Content search").
 * 1. Each list's scores are divided by the list's best score (0..1 within the query).
 * 2. The lexical list (BM25, RM3 and their re-ranking: no model in them) is the anchor, weight 1. Each
 *    other side m earns a weight from the evidence of THIS query: w_m = ½ · a_m, where a_m is the share
 *    of m's top 10 that BM25's top 10 confirms. A side that retrieves noise (a weak embedder, a graph
 *    with no matching entity) finds no confirmation and fades out; a side that agrees with BM25 on its
 *    best candidates reorders and completes BM25's list with up to half BM25's say.
 * 3. fused(d) = Σ_m w_m · norm_m(d) / Σ_m w_m.
 * Without lexical hits (no query word in the scope: a paraphrase, a misspelling), the remaining sides
 * share the decision equally.
 *
 * Measured on Cranfield (225 queries, same run): RRF and equal-weight CombSUM scored below BM25 alone
 * (the hashed embedder and the graph are much weaker than BM25 there), an unanchored consensus weighting
 * too; the anchored weighting is above BM25 and flat for a secondary cap between ¼ and ½.
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

/** Size of the head of a list whose agreement with BM25 is measured. */
export const TOP = 10;
/** A secondary side counts at most this much of the anchor. */
export const SECONDARY_CAP = 0.5;

export function weights(lists: Partial<Record<Method, Ranked[]>>): Partial<Record<Method, number>> {
  const present = METHODS.filter((m) => (lists[m]?.length ?? 0) > 0);
  const out: Partial<Record<Method, number>> = {};
  if (!present.includes('lexical')) {
    for (const m of present) out[m] = 1;
    return out;
  }
  out.lexical = 1;
  const anchor = new Set(lists.lexical!.slice(0, TOP).map((r) => r.id));
  for (const m of present) {
    if (m === 'lexical') continue;
    const head = lists[m]!.slice(0, TOP);
    out[m] = SECONDARY_CAP * (head.filter((r) => anchor.has(r.id)).length / head.length);
  }
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
