/**
 * The module `stem` next to `base` (the caller's import.meta.url) in the form this process runs: `.ts`
 * from the TypeScript sources (tsx), `.js` from the built JavaScript (dist/, `npm run build`). A worker
 * thread or child process started on it from the sources must register tsx's loader first: tsx does not
 * pass it on.
 */
export function siblingModule(base: string, stem: string): { url: URL; fromSource: boolean } {
  const fromSource = base.endsWith('.ts');
  return { url: new URL(`./${stem}${fromSource ? '.ts' : '.js'}`, base), fromSource };
}
