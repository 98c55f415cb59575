import { slicer } from '../../shared/slices.js';

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

const NONE: readonly number[] = [];
/** At most this many names are indexed synchronously when a compaction switches over. */
const SWITCH_BATCH = 2_048;

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
  private ids = new Map<string, number>();
  private names: string[] = [];
  private refs: number[] = [];
  private sizes: number[] = [];
  /** per trigram, the ids of the names holding it by their trigram count (ascending ids in each list) */
  private postings = new Map<string, Array<number[] | undefined>>();
  private counter = new Int32Array(0);
  /** the candidates of one length in similar(): touched[0 .. count), as many slots as counter */
  private touched = new Int32Array(0);
  private dead = 0;
  private entries = 0;
  private deadEntries = 0;
  /** Bumped when compaction renumbers the names: ids read before it are stale. */
  generation = 0;

  /** estimated heap bytes of the names segments hold (those of dropped names are reclaimed by compact) */
  get liveBytes(): number {
    return (this.names.length - this.dead) * 120 + (this.entries - this.deadEntries) * 12;
  }

  /** Adds a reference to `name` and returns its id (valid until `generation` moves). */
  add(name: string): number {
    const id = this.ids.get(name);
    if (id !== undefined) {
      if (this.refs[id] === 0) {
        this.dead--;
        this.deadEntries -= this.sizes[id]!;
      }
      this.refs[id]!++;
      return id;
    }
    return this.index(name, 1);
  }

  /** The id of a name some segment holds, or −1. */
  idOf(name: string): number {
    const id = this.ids.get(name);
    return id === undefined || this.refs[id] === 0 ? -1 : id;
  }

  nameAt(id: number): string {
    return this.names[id]!;
  }

  /** Ids are below this. */
  get idCount(): number {
    return this.names.length;
  }

  release(name: string): void {
    const id = this.ids.get(name);
    if (id === undefined || this.refs[id] === 0) return;
    this.refs[id]!--;
    if (this.refs[id] === 0) {
      this.dead++;
      this.deadEntries += this.sizes[id]!;
    }
    if (this.dead > 1000 && this.dead > this.names.length - this.dead) this.startCompaction();
  }

  /** Whether a compaction is being built (tests wait on `compacted`). */
  get compacting(): boolean {
    return this.compaction !== undefined;
  }

  /** Settles when no compaction is under way. */
  get compacted(): Promise<void> {
    return this.compaction ?? Promise.resolve();
  }

  private index(name: string, refs: number): number {
    const id = this.names.length;
    const grams = trigrams(name);
    this.ids.set(name, id);
    this.names.push(name);
    this.refs.push(refs);
    this.sizes.push(grams.size);
    for (const g of grams) {
      let bySize = this.postings.get(g);
      if (!bySize) this.postings.set(g, (bySize = []));
      (bySize[grams.size] ??= []).push(id);
    }
    this.entries += grams.size;
    return id;
  }

  private compaction: Promise<void> | undefined;

  private startCompaction(): void {
    if (this.compaction) return;
    this.compaction = this.compact().finally(() => {
      this.compaction = undefined;
      // names released while it ran may call for another
      if (this.dead > 1000 && this.dead > this.names.length - this.dead) this.startCompaction();
    });
  }

  /**
   * Drops the names no segment holds, renumbering the rest. The new index is built a slice at a time with
   * the event loop served between slices (indexing 200k names' trigrams takes seconds); lookups, adds and
   * releases meanwhile use the current one. The switch is synchronous and short: reference counts are
   * copied over, and names added or taken up again while the new index was built are indexed into it first
   * (in slices too while there are many of them).
   */
  private async compact(): Promise<void> {
    const next = new TrigramDictionary();
    /** new id → current id */
    const from: number[] = [];
    /** current ids already in `next` */
    let taken = new Uint8Array(this.names.length);
    const isTaken = (id: number) => id < taken.length && taken[id] === 1;
    const take = (id: number) => {
      if (id >= taken.length) {
        const grown = new Uint8Array(Math.max(this.names.length, id + 1));
        grown.set(taken);
        taken = grown;
      }
      taken[id] = 1;
      from.push(id);
      next.index(this.names[id]!, 0);
    };
    const slice = slicer();
    const takeInSlices = async (ids: Iterable<number>) => {
      let n = 0;
      for (const id of ids) {
        if ((n++ & 255) === 0) await slice();
        // released since it was listed, or taken already
        if (this.refs[id]! > 0 && !isTaken(id)) take(id);
      }
    };
    // the array iterator also reaches names added while it runs
    await takeInSlices(this.names.keys());
    // names taken up again (released to none when they were passed over, then added again) while it ran
    for (let round = 0; ; round++) {
      const missing: number[] = [];
      for (let id = 0; id < this.names.length; id++) if (this.refs[id]! > 0 && !isTaken(id)) missing.push(id);
      if (missing.length <= SWITCH_BATCH || round >= 8) {
        for (const id of missing) take(id);
        break;
      }
      await takeInSlices(missing);
    }
    // the switch: reference counts as they are now (a name released since it was taken is dead in `next`)
    let dead = 0;
    let deadEntries = 0;
    for (const [newId, id] of from.entries()) {
      const refs = this.refs[id]!;
      next.refs[newId] = refs;
      if (refs === 0) {
        dead++;
        deadEntries += next.sizes[newId]!;
      }
    }
    this.ids = next.ids;
    this.names = next.names;
    this.refs = next.refs;
    this.sizes = next.sizes;
    this.postings = next.postings;
    this.entries = next.entries;
    this.dead = dead;
    this.deadEntries = deadEntries;
    this.generation++;
  }

  /**
   * Held names with similarity ≥ min to `text` that `accept` keeps, best first (then by name), at most `limit`.
   * Names are looked for by their number of trigrams |B|, one length at a time:
   * - length filter: similarity ≤ min(|A|, |B|) / max(|A|, |B|), so only ⌈min·|A|⌉ ≤ |B| ≤ ⌊|A| / min⌋ can match;
   * - prefix filter: shared / (|A| + |B| − shared) ≥ min needs shared ≥ o = ⌈min·(|A| + |B|) / (1 + min)⌉, so
   *   such a name holds one of the |A| − o + 1 query trigrams rarest among names of its length; only their
   *   postings are read, and each candidate is looked up in the other trigrams' postings (ascending ids);
   * - top `limit`: the lengths closest to |A| are read first (their bound min(|A|, |B|) / max(|A|, |B|) is the
   *   highest), and once `limit` names are kept, the similarity of the last of them is the new floor of both
   *   filters: a name below it cannot be among the best `limit` (one equal to it can, and is still found).
   */
  similar(text: string, min: number, accept: (name: string) => boolean, limit: number): Similar[] {
    const q = trigrams(text);
    if (q.size === 0 || limit <= 0) return [];
    if (this.counter.length < this.names.length) {
      this.counter = new Int32Array(Math.max(this.names.length, this.counter.length * 2, 1024));
      this.touched = new Int32Array(this.counter.length);
    }
    const counter = this.counter;
    const touched = this.touched;
    const a = q.size;
    const bySizes = [...q].map((g) => this.postings.get(g) ?? []);
    const smallest = Math.max(1, Math.ceil(min * a - 1e-9));
    const largest = Math.min(min > 0 ? Math.floor(a / min + 1e-9) : Number.MAX_SAFE_INTEGER, Math.max(...bySizes.map((x) => x.length - 1)));
    let out: Similar[] = [];
    const bound = (b: number) => Math.min(a, b) / Math.max(a, b);
    const lengths: number[] = [];
    for (let b = smallest; b <= largest; b++) lengths.push(b);
    lengths.sort((x, y) => bound(y) - bound(x) || x - y);
    let floor = min;
    for (const b of lengths) {
      if (bound(b) < floor) break;
      const o = Math.max(1, Math.ceil((floor * (a + b)) / (1 + floor) - 1e-9));
      if (o > Math.min(a, b)) continue;
      const lists = bySizes.map((x) => x[b] ?? NONE).sort((x, y) => x.length - y.length);
      const prefix = a - o + 1;
      let count = 0;
      for (let k = 0; k < prefix; k++) {
        for (const id of lists[k]!) {
          if (counter[id] === 0) touched[count++] = id;
          counter[id]!++;
        }
      }
      if (count === 0) continue;
      // the other trigrams are counted for the candidates only: a short list by reading it, a long one by
      // looking each candidate up in it (whichever reads fewer entries)
      const looked: Array<readonly number[]> = [];
      for (let k = prefix; k < a; k++) {
        const list = lists[k]!;
        if (list.length > count * Math.log2(list.length + 1)) looked.push(list);
        else for (const id of list) if (counter[id]! > 0) counter[id]!++;
      }
      for (let x = 0; x < count; x++) {
        const id = touched[x]!;
        let shared = counter[id]!;
        counter[id] = 0;
        // released, or cannot share enough even with every trigram still to look up
        if (this.refs[id] === 0 || shared + looked.length < o) continue;
        for (const list of looked) if (list[lowerBound(list, id)] === id) shared++;
        const sim = ratio(shared, a, b);
        if (sim >= floor && accept(this.names[id]!)) out.push({ name: this.names[id]!, sim });
      }
      if (out.length >= limit) {
        floor = Math.max(floor, out.map((m) => m.sim).sort((x, y) => y - x)[limit - 1]!);
        out = out.filter((m) => m.sim >= floor);
      }
    }
    return out.sort(bySimilarity).slice(0, limit);
  }
}
