/** Outcome of one provider-side revoke call. */
export interface RevokeOutcome {
  attempted: boolean;
  ok: boolean;
  status: number;
  reason: string;
}

export const CLOUD_REVOKE_TIMEOUT_MS = 5000;

/**
 * Asks the provider to revoke a token, best effort: never throws, gives up after `timeoutMs`.
 * The request carries the token both as an RFC 7009 form field (`token=…`, Google and most OAuth
 * servers) and as a bearer token (Dropbox-style revoke endpoints), so one call fits both styles.
 * Redirects are not followed: the URL comes from configuration and a redirect is reported as a failure.
 */
export async function revokeAtProvider(url: string, token: string, timeoutMs = CLOUD_REVOKE_TIMEOUT_MS): Promise<RevokeOutcome> {
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Bearer ${token}` },
      body: new URLSearchParams({ token }).toString(),
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    });
    await res.body?.cancel().catch(() => undefined);
    const ok = res.status >= 200 && res.status < 300;
    return { attempted: true, ok, status: res.status, reason: ok ? `the provider confirmed (${res.status})` : `the provider answered ${res.status}` };
  } catch (err) {
    const name = (err as Error).name;
    if (name === 'TimeoutError' || name === 'AbortError') return { attempted: true, ok: false, status: 0, reason: `the provider did not answer within ${timeoutMs} ms` };
    return { attempted: true, ok: false, status: 0, reason: 'the provider could not be reached' };
  }
}
