import type { AppConfig } from '../../../config.js';

// Filled in once the re-embedding job exists (vault work in progress).
export async function reembedFromCli(_config: AppConfig, out: (line: string) => void): Promise<void> {
  out('reembed: not available yet');
}
