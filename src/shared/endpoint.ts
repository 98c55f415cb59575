/**
 * host:port of a service URL (DATABASE_URL, REDIS_URL) as a message may name it: never its credentials,
 * IPv6 brackets removed, the scheme's default port when none is written. Undefined for what is not a URL.
 */
export function endpointOf(raw: string | undefined, defaultPort: number): { host: string; port: number } | undefined {
  if (!raw) return undefined;
  try {
    const u = new URL(raw);
    return { host: u.hostname.replace(/^\[(.*)\]$/, '$1') || 'localhost', port: Number(u.port) || defaultPort };
  } catch {
    return undefined;
  }
}
