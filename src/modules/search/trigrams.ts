/**
 * Trigram similarity as pg_trgm defines it, for the entity names held in memory (segments.ts): the
 * trigrams of a string are those of its lower-cased words of letters and digits, each word padded with
 * two spaces before and one after; similarity = shared / (|A| + |B| − shared), counted over distinct
 * trigrams. Used to correct misspelt names and to match query phrases to entities fuzzily.
 */
export function trigrams(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.toLowerCase().matchAll(/[\p{L}\p{N}]+/gu)) {
    const chars = [...`  ${m[0]} `];
    for (let i = 0; i + 3 <= chars.length; i++) out.add(chars[i]! + chars[i + 1]! + chars[i + 2]!);
  }
  return out;
}

/** Sets of `a` and `b` trigrams sharing `shared`: pg_trgm's similarity. */
const ratio = (shared: number, a: number, b: number) => shared / (a + b - shared);

export function similarity(a: ReadonlySet<string>, b: ReadonlySet<string>): number {
  if (a.size === 0 || b.size === 0) return 0;
  let shared = 0;
  for (const t of a) if (b.has(t)) shared++;
  return ratio(shared, a.size, b.size);
}

/** Strings in UTF-16 code unit order (JavaScript's default sort; the order ties are broken in). */
export const compareText = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** The first position in the ascending `list` whose value is not below `id` (the list's length when none is). */
function lowerBound(list: readonly number[], id: number): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (list[mid]! < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export interface Similar {
  name: string;
  sim: number;
}

/** Most similar first, then by name. */
export const bySimilarity = (a: Similar, b: Similar): number => b.sim - a.sim || compareText(a.name, b.name);

/**
 * A trigram index over the distinct entity names of the segments the cache holds, shared by them
 * (the same name in many uploads is indexed once). Names are counted by the segments holding them; a
 * name no segment holds any more is skipped by lookups and dropped when the index is compacted, which
 * happens when such names outnumber the live ones.
 */
export class TrigramDictionary {
  private readonly ids = new Map<string, number>();
  private names: string[] = [];
  private refs: number[] = [];
  private sizes: number[] = [];
  private postings = new Map<string, number[]>();
  private counter = new Int32Array(0);
  private dead = 0;
  private entries = 0;
  private deadEntries = 0;

  /** estimated heap bytes of the names segments hold (those of dropped names are reclaimed by compact) */
  get liveBytes(): number {
    return (this.names.length - this.dead) * 120 + (this.entries - this.deadEntries) * 12;
  }

  add(name: string): void {
    const id = this.ids.get(name);
    if (id !== undefined) {
      if (this.refs[id] === 0) {
        this.dead--;
        this.deadEntries -= this.sizes[id]!;
      }
      this.refs[id]!++;
      return;
    }
    this.index(name, 1);
  }

  release(name: string): void {
    const id = this.ids.get(name);
    if (id === undefined || this.refs[id] === 0) return;
    this.refs[id]!--;
    if (this.refs[id] === 0) {
      this.dead++;
      this.deadEntries += this.sizes[id]!;
    }
    if (this.dead > 1000 && this.dead > this.names.length - this.dead) this.compact();
  }

  private index(name: string, refs: number): void {
    const id = this.names.length;
    const grams = trigrams(name);
    this.ids.set(name, id);
    this.names.push(name);
    this.refs.push(refs);
    this.sizes.push(grams.size);
    for (const g of grams) {
      const list = this.postings.get(g);
      if (list) list.push(id);
      else this.postings.set(g, [id]);
    }
    this.entries += grams.size;
  }

  /** Drops the names no segment holds (renumbering the rest). */
  private compact(): void {
    if (this.dead === 0) return;
    const live = this.names.map((n, i) => [n, this.refs[i]!] as const).filter(([, r]) => r > 0);
    this.ids.clear();
    this.names = [];
    this.refs = [];
    this.sizes = [];
    this.postings = new Map();
    this.entries = 0;
    this.dead = 0;
    this.deadEntries = 0;
    for (const [name, refs] of live) this.index(name, refs);
  }

  /**
   * Held names with similarity ≥ min to `text` that `accept` keeps, best first (then by name), at most `limit`.
   * Prefix filter: a name with similarity ≥ min shares at least ⌈min·|A|⌉ of the query's |A| trigrams
   * (similarity ≤ shared / |A|), so it holds one of the |A| − ⌈min·|A|⌉ + 1 rarest; only their postings are
   * read, and each candidate is looked up in the other (common) trigrams' postings (ascending ids).
   */
  similar(text: string, min: number, accept: (name: string) => boolean, limit: number): Similar[] {
    const q = trigrams(text);
    if (q.size === 0 || limit <= 0) return [];
    if (this.counter.length < this.names.length) this.counter = new Int32Array(Math.max(this.names.length, this.counter.length * 2, 1024));
    const counter = this.counter;
    const a = q.size;
    const need = Math.max(1, Math.ceil(min * a - 1e-9));
    const grams = [...q].map((g) => ({ g, list: this.postings.get(g) ?? [] })).sort((x, y) => x.list.length - y.list.length);
    const prefix = a - need + 1;
    const touched: number[] = [];
    for (let k = 0; k < prefix; k++) {
      for (const id of grams[k]!.list) {
        if (counter[id] === 0) touched.push(id);
        counter[id]!++;
      }
    }
    const rest = grams.slice(prefix).map((x) => x.list);
    const out: Similar[] = [];
    for (const id of touched) {
      let shared = counter[id]!;
      counter[id] = 0;
      if (this.refs[id] === 0) continue;
      const size = this.sizes[id]!;
      // the most it can share: all the common trigrams too
      if (ratio(Math.min(size, shared + rest.length), a, size) < min) continue;
      for (const list of rest) if (list[lowerBound(list, id)] === id) shared++;
      const sim = ratio(shared, a, size);
      if (sim >= min && accept(this.names[id]!)) out.push({ name: this.names[id]!, sim });
    }
    return out.sort(bySimilarity).slice(0, limit);
  }
}
