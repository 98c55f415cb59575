/**
 * A seeded generator of numbers in [0, 1) (mulberry32): the same sequence on every run and every machine, for
 * tests that build data at random. 32-bit integer arithmetic throughout, so no product leaves doubles' exact range.
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
