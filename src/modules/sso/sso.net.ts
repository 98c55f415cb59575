import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * Outbound requests of the SSO test, guarded against server-side request forgery.
 *
 * - Link-local (169.254.0.0/16, fe80::/10, which hold the cloud metadata services), cloud metadata
 *   addresses outside that range, unspecified, multicast and reserved addresses are always refused.
 * - Private and loopback addresses (RFC 1918, 127/8, ::1, fc00::/7, CGNAT) are refused unless
 *   SSO_TEST_ALLOW_PRIVATE=true.
 * - The check runs on the address actually connected to: literal IPs before connecting, names inside
 *   the socket's DNS lookup (so a name cannot resolve to one address for the check and another for the
 *   connection), and again on every redirect hop. IPv4-mapped IPv6 addresses count as their IPv4, and so
 *   do the IPv6 forms that reach an IPv4 address through a translator or a tunnel (embeddedIpv4s).
 */
const ALWAYS = new BlockList();
ALWAYS.addSubnet('0.0.0.0', 8, 'ipv4');
ALWAYS.addSubnet('169.254.0.0', 16, 'ipv4');
ALWAYS.addAddress('100.100.100.200', 'ipv4'); // Alibaba Cloud metadata
ALWAYS.addAddress('192.0.0.192', 'ipv4'); // Oracle Cloud metadata
ALWAYS.addSubnet('224.0.0.0', 4, 'ipv4'); // multicast
ALWAYS.addSubnet('240.0.0.0', 4, 'ipv4'); // reserved, broadcast
ALWAYS.addAddress('::', 'ipv6');
ALWAYS.addSubnet('fe80::', 10, 'ipv6');
ALWAYS.addSubnet('ff00::', 8, 'ipv6');
ALWAYS.addAddress('fd00:ec2::254', 'ipv6'); // AWS metadata over IPv6

const PRIVATE = new BlockList();
PRIVATE.addSubnet('10.0.0.0', 8, 'ipv4');
PRIVATE.addSubnet('172.16.0.0', 12, 'ipv4');
PRIVATE.addSubnet('192.168.0.0', 16, 'ipv4');
PRIVATE.addSubnet('127.0.0.0', 8, 'ipv4');
PRIVATE.addSubnet('100.64.0.0', 10, 'ipv4');
PRIVATE.addSubnet('192.0.0.0', 24, 'ipv4');
PRIVATE.addSubnet('198.18.0.0', 15, 'ipv4');
PRIVATE.addAddress('::1', 'ipv6');
PRIVATE.addSubnet('fc00::', 7, 'ipv6');
PRIVATE.addSubnet('fec0::', 10, 'ipv6'); // site-local (deprecated by RFC 3879, still routed inside some networks)
PRIVATE.addSubnet('64:ff9b:1::', 48, 'ipv6'); // local-use NAT64 (RFC 8215): the IPv4 it reaches can sit anywhere in it

export type AddressVerdict = { allowed: true } | { allowed: false; reason: string };

/** The eight 16-bit groups of an IPv6 address (a trailing dotted quad allowed), or null. */
function ipv6Groups(address: string): number[] | null {
  let text = address.toLowerCase();
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/u.exec(text);
  if (quad) {
    const b = quad.slice(1, 5).map(Number);
    text = `${text.slice(0, quad.index)}${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const part = (h: string) => (h === '' ? [] : h.split(':').map((g) => parseInt(g, 16)));
  const head = part(halves[0]!);
  const tail = halves.length === 2 ? part(halves[1]!) : [];
  const groups = halves.length === 2 ? [...head, ...Array<number>(8 - head.length - tail.length).fill(0), ...tail] : head;
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : null;
}

const hi = (group: number) => group >>> 8;
const lo = (group: number) => group & 0xff;
/** An IPv4 address from its four bytes. */
const quad = (a: number, b: number, c: number, d: number) => `${a}.${b}.${c}.${d}`;
/** An IPv4 address from two 16-bit groups. */
const ipv4Of = (high: number, low: number) => quad(hi(high), lo(high), hi(low), lo(low));

/**
 * The IPv4 addresses an IPv6 one may carry, for the forms that reach one through a translator or a tunnel:
 * NAT64 (64:ff9b::/96; the local-use 64:ff9b:1::/48, private as a whole, with a candidate for each prefix
 * length it may be used with), 6to4 (2002::/16), Teredo (2001::/32, the client address inverted), the
 * deprecated IPv4-compatible ::/96 and the IPv4-translated ::ffff:0:0/96 (SIIT). Empty for any other address;
 * IPv4-mapped addresses (::ffff:0:0/96 without the zero group) BlockList already checks as their IPv4.
 */
function embeddedIpv4s(address: string): string[] {
  const g = ipv6Groups(address);
  if (!g) return [];
  // NAT64, well-known prefix 64:ff9b::/96 (RFC 6052)
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) return [ipv4Of(g[6]!, g[7]!)];
  // NAT64, local-use prefix 64:ff9b:1::/48 (RFC 8215): the translator's prefix is /48 to /96, and each length
  // places the IPv4 address elsewhere (RFC 6052 §2.2, around the reserved octet of bits 64–71): all are candidates
  // (the zeros the other layouts read as 0.0.0.0/8, which no translator routes, are left out)
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 1) {
    return [
      quad(hi(g[3]!), lo(g[3]!), lo(g[4]!), hi(g[5]!)), // /48
      quad(lo(g[3]!), lo(g[4]!), hi(g[5]!), lo(g[5]!)), // /56
      quad(lo(g[4]!), hi(g[5]!), lo(g[5]!), hi(g[6]!)), // /64
      ipv4Of(g[6]!, g[7]!), // /96
    ].filter((a) => !a.startsWith('0.'));
  }
  // 6to4 (2002::/16) and Teredo (2001::/32, the client's address inverted)
  if (g[0] === 0x2002) return [ipv4Of(g[1]!, g[2]!)];
  if (g[0] === 0x2001 && g[1] === 0) return [ipv4Of(g[6]! ^ 0xffff, g[7]! ^ 0xffff)];
  // IPv4-compatible (::a.b.c.d), and IPv4-translated (::ffff:0:a.b.c.d, SIIT, RFC 2765)
  if (g.slice(0, 6).every((x) => x === 0) && (g[6] !== 0 || g[7]! > 1)) return [ipv4Of(g[6]!, g[7]!)];
  if (g.slice(0, 4).every((x) => x === 0) && g[4] === 0xffff && g[5] === 0) return [ipv4Of(g[6]!, g[7]!)];
  return [];
}

/** Why an address (family 4 or 6) is refused, as the rest of a sentence about it; null when it is not. */
function refusalOf(address: string, family: number, allowPrivate: boolean): string | null {
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (ALWAYS.check(address, type)) return 'is a link-local, metadata or reserved address (always refused)';
  if (!allowPrivate && PRIVATE.check(address, type)) return 'is a private or loopback address (refused unless SSO_TEST_ALLOW_PRIVATE=true)';
  return null;
}

export function classifyAddress(address: string, allowPrivate: boolean): AddressVerdict {
  const family = isIP(address);
  if (family === 0) return { allowed: false, reason: `${address} is not an IP address` };
  for (const inner of family === 6 ? embeddedIpv4s(address) : []) {
    const innerRefusal = refusalOf(inner, 4, allowPrivate);
    if (innerRefusal) return { allowed: false, reason: `${address} carries ${inner}: ${innerRefusal}` };
  }
  const refusal = refusalOf(address, family, allowPrivate);
  return refusal ? { allowed: false, reason: `${address} ${refusal}` } : { allowed: true };
}

/** Hostname of a URL without IPv6 brackets. */
export const bareHost = (url: URL): string => url.hostname.replace(/^\[(.*)\]$/, '$1');

/** Checks what can be checked without DNS: scheme, credentials, literal IP hosts. Returns a reason to refuse, or null. */
export function refuseUrl(url: URL, allowPrivate: boolean): string | null {
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && allowPrivate)) return allowPrivate ? 'the URL must be http: or https:' : 'the URL must be https: (http: only with SSO_TEST_ALLOW_PRIVATE=true)';
  if (url.username || url.password) return 'the URL must not carry credentials';
  const host = bareHost(url);
  if (isIP(host)) {
    const verdict = classifyAddress(host, allowPrivate);
    if (!verdict.allowed) return verdict.reason;
  }
  return null;
}

class BlockedAddressError extends Error {
  readonly code = 'EBLOCKEDADDRESS';
}

/** A DNS lookup for sockets that fails when any resolved address is refused. */
function guardedLookup(allowPrivate: boolean): LookupFunction {
  return ((hostname: string, options: { all?: boolean }, callback: (err: Error | null, address: string | LookupAddress[], family?: number) => void) => {
    dnsLookup(hostname, { all: true, verbatim: true }, (err, addresses) => {
      if (err) return callback(err, '');
      for (const a of addresses) {
        const verdict = classifyAddress(a.address, allowPrivate);
        if (!verdict.allowed) return callback(new BlockedAddressError(`${hostname} resolves to ${verdict.reason}`), '');
      }
      if (addresses.length === 0) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '');
      if (options?.all) return callback(null, addresses);
      return callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  }) as unknown as LookupFunction;
}

export interface ProbeResult {
  reachable: boolean;
  /** Last HTTP status seen; 0 when none. */
  status: number;
  message: string;
  /** Whether the request was refused by the address rules (no connection made to the refused address). */
  blocked: boolean;
}

export interface ProbeOptions {
  allowPrivate: boolean;
  timeoutMs: number;
  maxRedirects?: number;
  headers?: Record<string, string>;
  body?: string;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * POSTs `body` to the URL and reports the first non-redirect status. Redirects are followed (at most
 * `maxRedirects`), each hop checked like the first. A redirect to another origin drops the
 * `authorization` header for that hop and the ones after it (as fetch does): the client secret goes to the
 * configured token endpoint's origin only. The whole probe, redirects included, is bounded by `timeoutMs`;
 * the response body is never read.
 */
export async function probe(start: string, options: ProbeOptions): Promise<ProbeResult> {
  const deadline = Date.now() + options.timeoutMs;
  let url: URL;
  try {
    url = new URL(start);
  } catch {
    return { reachable: false, status: 0, message: 'The token endpoint is not a valid URL', blocked: false };
  }
  let method = 'POST';
  let headers = options.headers;
  const origin = url.origin;
  let lastStatus = 0;
  for (let hop = 0; hop <= (options.maxRedirects ?? 3); hop++) {
    const refusal = refuseUrl(url, options.allowPrivate);
    if (refusal) {
      return { reachable: lastStatus !== 0, status: lastStatus, message: `Refused${hop > 0 ? ' to follow a redirect' : ''}: ${refusal}`, blocked: true };
    }
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    const outcome = await requestOnce(url, method, { ...options, headers }, remaining);
    if (outcome.kind === 'error') {
      return { reachable: lastStatus !== 0, status: lastStatus, message: outcome.message, blocked: outcome.blocked };
    }
    lastStatus = outcome.status;
    if (!REDIRECTS.has(outcome.status) || !outcome.location) {
      return { reachable: true, status: outcome.status, message: `The token endpoint answered ${outcome.status}`, blocked: false };
    }
    try {
      url = new URL(outcome.location, url);
    } catch {
      return { reachable: true, status: outcome.status, message: `The token endpoint redirected to an invalid URL`, blocked: false };
    }
    if (outcome.status === 301 || outcome.status === 302 || outcome.status === 303) method = 'GET';
    if (url.origin !== origin && headers) headers = Object.fromEntries(Object.entries(headers).filter(([name]) => name.toLowerCase() !== 'authorization'));
  }
  if (lastStatus !== 0) return { reachable: true, status: lastStatus, message: 'Too many redirects, or no time left to follow them', blocked: false };
  return { reachable: false, status: 0, message: `No answer within ${options.timeoutMs / 1000} s`, blocked: false };
}

type Once = { kind: 'response'; status: number; location?: string } | { kind: 'error'; message: string; blocked: boolean };

function requestOnce(url: URL, method: string, options: ProbeOptions, timeoutMs: number): Promise<Once> {
  return new Promise((resolve) => {
    const client = url.protocol === 'https:' ? https : http;
    const body = method === 'POST' ? (options.body ?? '') : undefined;
    let settled = false;
    const finish = (o: Once) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.destroy();
      resolve(o);
    };
    const req = client.request(
      url,
      {
        method,
        lookup: guardedLookup(options.allowPrivate),
        headers: { ...options.headers, ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}) },
        agent: false,
      },
      (res) => {
        const location = typeof res.headers.location === 'string' ? res.headers.location : undefined;
        res.destroy();
        finish({ kind: 'response', status: res.statusCode ?? 0, location });
      },
    );
    const timer = setTimeout(() => finish({ kind: 'error', message: `No answer within ${options.timeoutMs / 1000} s`, blocked: false }), timeoutMs);
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err instanceof BlockedAddressError || err.code === 'EBLOCKEDADDRESS') return finish({ kind: 'error', message: `Refused: ${err.message}`, blocked: true });
      const why =
        err.code === 'ECONNREFUSED' ? 'the connection was refused'
        : err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN' ? 'the host name does not resolve'
        : err.code === 'ECONNRESET' ? 'the connection was reset'
        : err.code?.startsWith('ERR_TLS') || err.code?.includes('CERT') ? `TLS failed (${err.code})`
        : `the request failed (${err.code ?? err.message})`;
      finish({ kind: 'error', message: `The token endpoint is unreachable: ${why}`, blocked: false });
    });
    if (body !== undefined) req.end(body);
    else req.end();
  });
}
