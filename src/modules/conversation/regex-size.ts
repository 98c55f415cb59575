/**
 * An estimate of the size of the automaton Postgres builds for a regular expression (ARE syntax): every atom
 * counts 1, a group the sum of what it holds, and a counted repetition `{m}`, `{m,}` or `{m,n}` copies its
 * atom max(m, n) times (Postgres expands bounded repetitions when it compiles, so nested ones multiply:
 * `(.{0,255}){0,255}` is 65,025 copies and compiling it alone held the embedded engine for minutes).
 * `*`, `+` and `?` add no copies. Linear in the pattern; an invalid pattern gets some estimate and is left
 * to the engine to refuse.
 */
export function regexSize(pattern: string): number {
  const frames: Array<{ total: number; last: number }> = [{ total: 0, last: 0 }];
  const top = () => frames[frames.length - 1]!;
  const atom = (size: number) => {
    const f = top();
    f.total += size;
    f.last = size;
  };
  const n = pattern.length;
  for (let i = 0; i < n; i++) {
    const c = pattern[i]!;
    if (c === '\\') {
      i++; // the escaped character (longer escapes such as \x41 are a few atoms here: an overestimate)
      atom(1);
    } else if (c === '[') {
      // a bracket expression is one atom: skip to its closing bracket (a leading ] or ^] is literal;
      // [:class:], [.coll.] and [=equiv=] nest)
      let j = i + 1;
      if (pattern[j] === '^') j++;
      if (pattern[j] === ']') j++;
      while (j < n && pattern[j] !== ']') {
        const next = pattern[j + 1];
        if (pattern[j] === '[' && (next === ':' || next === '.' || next === '=')) {
          const close = pattern.indexOf(`${next}]`, j + 2);
          j = close < 0 ? n : close + 2;
        } else j++;
      }
      i = j;
      atom(1);
    } else if (c === '(') {
      if (pattern[i + 1] === '?') i += 2; // (?: (?= (?! (?<= (?<!: a group all the same
      frames.push({ total: 0, last: 0 });
    } else if (c === ')') {
      if (frames.length === 1) {
        atom(1);
        continue;
      }
      const inner = frames.pop()!.total;
      atom(Math.max(1, inner));
    } else if (c === '{') {
      const m = /^\{(\d{1,6})(,(\d{0,6}))?\}/u.exec(pattern.slice(i, i + 16));
      if (!m) {
        atom(1);
        continue;
      }
      const low = Number(m[1]);
      const high = m[2] === undefined ? low : m[3] === '' ? low + 1 : Number(m[3]);
      const copies = Math.max(1, low, high);
      const f = top();
      f.total += f.last * (copies - 1);
      f.last *= copies;
      i += m[0].length - 1;
    } else if (c !== '*' && c !== '+' && c !== '?') {
      atom(1); // a character, an anchor or a bar (at most one state each); the other quantifiers add no copies
    }
  }
  // unclosed groups: what they hold still counts
  while (frames.length > 1) {
    const inner = frames.pop()!.total;
    atom(inner);
  }
  return frames[0]!.total;
}
