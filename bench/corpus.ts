/** The deterministic text every benchmark ingests (same seed, same text, every run). */

/** Deterministic pseudo-random numbers (mulberry32), so every run ingests the same text. */
export function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  'the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were ' +
  'her she there been one all we their has would when if so no will more can out other into some could them than its only ' +
  'boundary layer flow pressure velocity wing surface shock wave heat transfer laminar turbulent supersonic subsonic mach ' +
  'number reynolds temperature theory experiment results measured equation solution method approximate numerical analysis ' +
  'cylinder cone plate body nose leading trailing edge separation viscous inviscid compressible incompressible gas stream ' +
  'density drag lift coefficient model tunnel data range ratio distribution region thickness stability vortex jet nozzle ' +
  'library river mountain history language market city government science music winter garden museum student teacher ' +
  'journey ocean forest bridge village engine letter report season harvest festival kingdom island harbour lantern'
).split(' ');

export function sentence(r: () => number): string {
  const n = 8 + Math.floor(r() * 18);
  const words: string[] = [];
  for (let i = 0; i < n; i++) words.push(WORDS[Math.floor(r() * WORDS.length)]!);
  const s = words.join(' ');
  return `${s[0]!.toUpperCase()}${s.slice(1)}${r() < 0.1 ? '?' : '.'}`;
}

export function corpus(bytes: number): string {
  const r = rng(42);
  const out: string[] = [];
  let size = 0;
  let section = 0;
  while (size < bytes) {
    if (r() < 0.08) {
      const heading = `## Section ${++section}: ${sentence(r).slice(0, 40).replace(/[.?]$/, '')}`;
      out.push(heading);
      size += heading.length + 2;
    }
    const paragraph = Array.from({ length: 2 + Math.floor(r() * 6) }, () => sentence(r)).join(' ');
    out.push(paragraph);
    size += paragraph.length + 2;
  }
  return out.join('\n\n');
}

