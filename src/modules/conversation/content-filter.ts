import type { ContentFilterConfig } from '../../config.js';
import { byteSize, readBoundedText } from '../../shared/bounded-body.js';
import { BoundedPatterns } from './bounded-patterns.js';

export interface FilterVerdict {
  blocked: boolean;
  /** Why (the rule or the provider's categories); never the matched user text itself. */
  reason?: string;
}

/** Longest text the rules look at; a Q&A input is bounded far below this by its schema anyway. */
const MAX_SCAN_CHARS = 200_000;

/**
 * The most bytes a moderation answer may have: a result an input (flags, scores and input types of about 13
 * categories: 1 to 3 KB) for the at most 200 texts of a request, many times over.
 */
export const MODERATION_MAX_BYTES = 4 * 1024 * 1024;

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/gu, '\\$&');

/**
 * The content filter of the Q&A pipeline (contract §6): local rules (CONTENT_FILTER_TERMS: words or
 * phrases matched case-insensitively on word boundaries; CONTENT_FILTER_PATTERNS: the operator's
 * regular expressions) and, when MODERATION_BASE_URL is set, a provider moderation call in the OpenAI
 * `/moderations` wire format, within MODERATION_TIMEOUT_MS (its body included) and at most
 * MODERATION_MAX_BYTES of answer (past it the connection is closed). A moderation call that fails does not
 * block (the local rules still ran) and is logged by the caller: availability of the answer is preferred
 * over a hard dependency.
 *
 * The terms become linear expressions of our own and run here. The operator's patterns may backtrack
 * without bound on a crafted input, so they run in a worker thread within CONTENT_FILTER_TIMEOUT_MS
 * (bounded-patterns.ts); a test that runs past it, or whose worker fails, blocks the request (fails
 * closed: an input that defeats the filter's own evaluation is not let through), and the caller logs it.
 */
export class ContentFilter {
  private readonly terms: RegExp[];
  private readonly patterns: BoundedPatterns;

  constructor(private readonly config: ContentFilterConfig) {
    this.terms = config.terms.map((t) => new RegExp(`(?<![\\p{L}\\p{N}])${escapeRegExp(t.trim())}(?![\\p{L}\\p{N}])`, 'iu'));
    this.patterns = new BoundedPatterns(config.patterns, config.patternTimeoutMs);
  }

  /** The local rules: the terms, then the operator's patterns (off this thread, bounded in time). */
  async localVerdict(texts: readonly string[], onPatternTrouble: (err: Error) => void = () => undefined): Promise<FilterVerdict> {
    const scanned = texts.map((text) => (text.length > MAX_SCAN_CHARS ? text.slice(0, MAX_SCAN_CHARS) : text));
    for (const text of scanned) for (const term of this.terms) if (term.test(text)) return { blocked: true, reason: 'blocked term' };
    try {
      const outcome = await this.patterns.test(scanned);
      if ('timedOut' in outcome) {
        onPatternTrouble(new Error(`CONTENT_FILTER_PATTERNS took more than ${this.config.patternTimeoutMs} ms on a request's texts (a pattern that backtracks); the request was refused`));
        return { blocked: true, reason: 'the content filter could not finish' };
      }
      return outcome.match >= 0 ? { blocked: true, reason: 'blocked pattern' } : { blocked: false };
    } catch (err) {
      onPatternTrouble(err as Error);
      return { blocked: true, reason: 'the content filter could not finish' };
    }
  }

  /** Ends the patterns' worker thread (the app's close). */
  close(): Promise<void> {
    return this.patterns.close();
  }

  async check(texts: readonly string[], onModerationError: (err: unknown) => void, onPatternTrouble?: (err: Error) => void): Promise<FilterVerdict> {
    const local = await this.localVerdict(texts, onPatternTrouble);
    if (local.blocked || !this.config.moderationBaseUrl) return local;
    try {
      return await this.moderate(texts);
    } catch (err) {
      onModerationError(err);
      return { blocked: false };
    }
  }

  private async moderate(texts: readonly string[]): Promise<FilterVerdict> {
    const url = `${this.config.moderationBaseUrl!.replace(/\/+$/u, '')}/moderations`;
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(this.config.moderationApiKey ? { authorization: `Bearer ${this.config.moderationApiKey}` } : {}) },
      body: JSON.stringify({ model: this.config.moderationModel, input: texts }),
      signal: AbortSignal.timeout(this.config.moderationTimeoutMs),
    });
    if (!res.ok) {
      await res.body?.cancel().catch(() => undefined);
      throw new Error(`moderation answered HTTP ${res.status}`);
    }
    // the signal's timeout bounds the body too; its size is bounded here
    const text = await readBoundedText(res, {
      maxBytes: MODERATION_MAX_BYTES,
      tooLarge: () => new Error(`the moderation answer was larger than ${byteSize(MODERATION_MAX_BYTES)}; the connection was closed`),
    });
    const body = JSON.parse(text) as { results?: Array<{ flagged?: boolean; categories?: Record<string, boolean> }> };
    for (const r of body.results ?? []) {
      if (r.flagged) {
        const categories = Object.entries(r.categories ?? {}).filter(([, v]) => v).map(([k]) => k);
        return { blocked: true, reason: `flagged by moderation${categories.length ? ` (${categories.join(', ')})` : ''}` };
      }
    }
    return { blocked: false };
  }
}
