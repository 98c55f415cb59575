import helmet from 'helmet';

/**
 * The headers helmet sets with this configuration (no content security policy; HSTS when configured),
 * computed once by running helmet's own middleware against a recording response. Its options and
 * defaults stay helmet's; what is saved is helmet's per-request work: @fastify/helmet ran this
 * middleware chain with a setHeader call per header on every request (bench/RESULTS.md).
 */
export function staticSecurityHeaders(hstsMaxAgeSeconds: number): Record<string, string> {
  const middleware = helmet({
    contentSecurityPolicy: false,
    strictTransportSecurity: hstsMaxAgeSeconds > 0 ? { maxAge: hstsMaxAgeSeconds, includeSubDomains: true } : false,
  });
  const headers: Record<string, string> = {};
  const recorder = {
    setHeader: (name: string, value: string | number | readonly string[]) => void (headers[name.toLowerCase()] = String(value)),
    removeHeader: (name: string) => void delete headers[name.toLowerCase()],
  };
  let ran = false;
  middleware({} as never, recorder as never, (err?: unknown) => {
    if (err) throw err;
    ran = true;
  });
  if (!ran) throw new Error('helmet did not run synchronously');
  return headers;
}
