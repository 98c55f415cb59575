/**
 * The embedded default embedder: deterministic feature hashing, no model, no network.
 *
 * Text is lower-cased (NFKC) and cut into unicode word tokens (letters, digits, marks). Version 2 (the
 * default) leaves out English stop words (the Snowball list, the one of the lexical side's `english`
 * configuration), unless the text has no other word; version 1 keeps every word. Features of the words kept:
 * - every word (weight 1.0),
 * - every pair of adjacent words (weight 0.6; in version 2 a stop word between two words parts them),
 * - every character trigram of each word padded with boundary marks, `^wo`, `wor`, `rd$` (weight 0.2).
 * Each feature is hashed (FNV-1a 32-bit, with a separate seed per feature kind, then a murmur3
 * finaliser) to a dimension (low 31 bits modulo `dimensions`) and a sign (the top bit). A feature
 * seen `tf` times adds `weight * (1 + ln tf)`. The vector is L2-normalised; a text without any word
 * gives the zero vector.
 *
 * Good enough for lexical similarity (shared words, shared stems through trigrams); it knows no
 * synonyms. Why version 2: in 384 dimensions the stop words (a third of English text) take most of a
 * vector's length and collide with the content words; without them dense-only nDCG@10 on Cranfield went
 * from 0.198 to 0.269 and the fused search from 0.3895 to 0.3930 (`npm run eval:search`).
 * Changing anything here changes the vectors: add a version (the `id` names it).
 */
import type { Embedder } from './types.js';
import { ENGLISH_STOP_WORDS } from '../../shared/stop-words.js';

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const SEED_WORD = 0x9e3779b1;
const SEED_BIGRAM = 0x85ebca6b;
const SEED_TRIGRAM = 0xc2b2ae35;
const PAD_START = 0x02; // boundary marks, never part of a word token
const PAD_END = 0x03;

const WEIGHT_WORD = 1.0;
const WEIGHT_BIGRAM = 0.6;
const WEIGHT_TRIGRAM = 0.2;

const WORD = /[\p{L}\p{N}\p{M}]+/gu;

export const LOCAL_EMBEDDER_VERSIONS = [1, 2] as const;
export type LocalEmbedderVersion = (typeof LOCAL_EMBEDDER_VERSIONS)[number];

function fnvStep(hash: number, code: number): number {
  return Math.imul(hash ^ code, FNV_PRIME);
}

function fnvString(hash: number, s: string): number {
  for (let i = 0; i < s.length; i++) hash = Math.imul(hash ^ s.charCodeAt(i), FNV_PRIME);
  return hash;
}

/** murmur3 fmix32: spreads FNV's weak low bits over the whole word. */
function finalise(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

const KIND_WEIGHTS = [WEIGHT_WORD, WEIGHT_BIGRAM, WEIGHT_TRIGRAM];
const KIND_WORD = 0;
const KIND_BIGRAM = 1;
const KIND_TRIGRAM = 2;

/** Term frequencies of feature hashes: an open-addressing table reused from text to text. */
class FeatureCounts {
  private capacity = 1024;
  keys = new Uint32Array(this.capacity);
  counts = new Uint32Array(this.capacity);
  kinds = new Uint8Array(this.capacity);
  /** Occupied slots, in insertion order. */
  slots = new Int32Array(this.capacity);
  size = 0;

  clear(): void {
    for (let i = 0; i < this.size; i++) this.counts[this.slots[i]!] = 0;
    this.size = 0;
  }

  add(hash: number, kind: number): void {
    if (this.size * 2 >= this.capacity) this.grow();
    const mask = this.capacity - 1;
    let slot = hash & mask;
    for (;;) {
      const c = this.counts[slot]!;
      if (c === 0) {
        this.keys[slot] = hash;
        this.counts[slot] = 1;
        this.kinds[slot] = kind;
        this.slots[this.size++] = slot;
        return;
      }
      if (this.keys[slot] === hash) {
        this.counts[slot] = c + 1;
        return;
      }
      slot = (slot + 1) & mask;
    }
  }

  private grow(): void {
    const { keys, counts, kinds, slots, size } = this;
    this.capacity *= 2;
    this.keys = new Uint32Array(this.capacity);
    this.counts = new Uint32Array(this.capacity);
    this.kinds = new Uint8Array(this.capacity);
    this.slots = new Int32Array(this.capacity);
    this.size = 0;
    const mask = this.capacity - 1;
    for (let i = 0; i < size; i++) {
      const old = slots[i]!;
      let slot = keys[old]! & mask;
      while (this.counts[slot] !== 0) slot = (slot + 1) & mask;
      this.keys[slot] = keys[old]!;
      this.counts[slot] = counts[old]!;
      this.kinds[slot] = kinds[old]!;
      this.slots[this.size++] = slot;
    }
  }
}

function charAt(word: string, i: number, n: number): number {
  return i === 0 ? PAD_START : i === n - 1 ? PAD_END : word.charCodeAt(i - 1);
}

export class LocalEmbedder implements Embedder {
  readonly id: string;
  readonly dimensions: number;
  private readonly features = new FeatureCounts();

  readonly version: LocalEmbedderVersion;

  constructor(dimensions = 384, version: LocalEmbedderVersion = 2) {
    if (!Number.isInteger(dimensions) || dimensions < 1) throw new Error(`LocalEmbedder: dimensions must be a positive integer, got ${dimensions}`);
    if (!LOCAL_EMBEDDER_VERSIONS.includes(version)) throw new Error(`LocalEmbedder: unknown version ${String(version)}`);
    this.dimensions = dimensions;
    this.version = version;
    this.id = `local:hashed-ngrams-v${version}:${dimensions}`;
  }

  async embed(texts: string[], options?: { signal?: AbortSignal }): Promise<number[][]> {
    const out: number[][] = [];
    for (const text of texts) {
      options?.signal?.throwIfAborted();
      out.push(this.embedOne(text));
    }
    return out;
  }

  /** The vector of one text (synchronous). */
  embedOne(text: string): number[] {
    const dims = this.dimensions;
    const vector = new Float64Array(dims);
    const words = text.normalize('NFKC').toLowerCase().match(WORD);
    if (!words) return Array.from(vector);

    const features = this.features;
    features.clear();
    const skipStopWords = this.version >= 2 && words.some((w) => !ENGLISH_STOP_WORDS.has(w));
    let previous = false;
    let previousWordHash = 0;
    for (let w = 0; w < words.length; w++) {
      const word = words[w]!;
      if (skipStopWords && ENGLISH_STOP_WORDS.has(word)) {
        previous = false;
        continue;
      }
      const wordHash = fnvString(FNV_OFFSET, word);
      features.add(finalise(wordHash ^ SEED_WORD), KIND_WORD);
      if (previous) features.add(finalise(fnvStep(Math.imul(previousWordHash, FNV_PRIME) ^ SEED_BIGRAM, wordHash)), KIND_BIGRAM);
      previous = true;
      previousWordHash = wordHash;
      // trigrams of PAD_START + word + PAD_END (UTF-16 code units)
      const n = word.length + 2;
      for (let i = 0; i + 3 <= n; i++) {
        let h = FNV_OFFSET ^ SEED_TRIGRAM;
        h = fnvStep(h, charAt(word, i, n));
        h = fnvStep(h, charAt(word, i + 1, n));
        h = fnvStep(h, charAt(word, i + 2, n));
        features.add(finalise(h), KIND_TRIGRAM);
      }
    }

    for (let k = 0; k < features.size; k++) {
      const slot = features.slots[k]!;
      const h = features.keys[slot]!;
      const weight = KIND_WEIGHTS[features.kinds[slot]!]! * (1 + Math.log(features.counts[slot]!));
      const index = (h & 0x7fffffff) % dims;
      vector[index]! += h & 0x80000000 ? -weight : weight;
    }
    features.clear();

    let norm = 0;
    for (let i = 0; i < dims; i++) norm += vector[i]! * vector[i]!;
    if (norm === 0) return Array.from(vector);
    const inv = 1 / Math.sqrt(norm);
    const result = new Array<number>(dims);
    for (let i = 0; i < dims; i++) result[i] = vector[i]! * inv;
    return result;
  }
}
