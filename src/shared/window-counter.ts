/**
 * Counts events per key in a fixed window that starts with the key's first counted event (in this
 * process). Used where a rate limit must be checked without counting (only some outcomes count).
 */
export class WindowCounter {
  private readonly windows = new Map<string, { start: number; count: number }>();

  constructor(private readonly windowMs: number) {}

  /** Events counted for the key in its current window, and the seconds until that window ends. */
  peek(key: string, now: number): { count: number; retryAfterSeconds: number } {
    const w = this.windows.get(key);
    if (!w || now - w.start >= this.windowMs) return { count: 0, retryAfterSeconds: 0 };
    return { count: w.count, retryAfterSeconds: Math.max(1, Math.ceil((w.start + this.windowMs - now) / 1000)) };
  }

  hit(key: string, now: number): void {
    const w = this.windows.get(key);
    if (!w || now - w.start >= this.windowMs) this.windows.set(key, { start: now, count: 1 });
    else w.count += 1;
    if (this.windows.size > 10_000) this.prune(now);
  }

  private prune(now: number): void {
    for (const [key, w] of this.windows) if (now - w.start >= this.windowMs) this.windows.delete(key);
  }
}
