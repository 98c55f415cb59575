import type { ContentFilterConfig } from '../../config.js';

export interface FilterVerdict {
  blocked: boolean;
  /** Why (the rule or the provider's categories); never the matched user text itself. */
  reason?: string;
}

/** Longest text the rules look at; a Q&A input is bounded far below this by its schema anyway. */
const MAX_SCAN_CHARS = 200_000;

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/gu, '\\$&');

/**
 * The content filter of the Q&A pipeline (contract §6): local rules (CONTENT_FILTER_TERMS: words or
 * phrases matched case-insensitively on word boundaries; CONTENT_FILTER_PATTERNS: the operator's
 * regular expressions) and, when MODERATION_BASE_URL is set, a provider moderation call in the OpenAI
 * `/moderations` wire format. A moderation call that fails does not block (the local rules still ran)
 * and is logged by the caller: availability of the answer is preferred over a hard dependency.
 */
export class ContentFilter {
  private readonly rules: Array<{ re: RegExp; reason: string }>;

  constructor(private readonly config: ContentFilterConfig) {
    this.rules = [
      ...config.terms.map((t) => ({ re: new RegExp(`(?<![\\p{L}\\p{N}])${escapeRegExp(t.trim())}(?![\\p{L}\\p{N}])`, 'iu'), reason: 'blocked term' })),
      ...config.patterns.map((p) => ({ re: new RegExp(p, 'iu'), reason: 'blocked pattern' })),
    ];
  }

  localVerdict(texts: readonly string[]): FilterVerdict {
    for (const text of texts) {
      const scanned = text.length > MAX_SCAN_CHARS ? text.slice(0, MAX_SCAN_CHARS) : text;
      for (const rule of this.rules) if (rule.re.test(scanned)) return { blocked: true, reason: rule.reason };
    }
    return { blocked: false };
  }

  async check(texts: readonly string[], onModerationError: (err: unknown) => void): Promise<FilterVerdict> {
    const local = this.localVerdict(texts);
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
    if (!res.ok) throw new Error(`moderation answered HTTP ${res.status}`);
    const body = (await res.json()) as { results?: Array<{ flagged?: boolean; categories?: Record<string, boolean> }> };
    for (const r of body.results ?? []) {
      if (r.flagged) {
        const categories = Object.entries(r.categories ?? {}).filter(([, v]) => v).map(([k]) => k);
        return { blocked: true, reason: `flagged by moderation${categories.length ? ` (${categories.join(', ')})` : ''}` };
      }
    }
    return { blocked: false };
  }
}
