/**
 * URL fields of an institution (branding pictures, publicAuthorizedUrls, invoices_urls) hold absolute
 * `https:` URLs; `http:` is accepted only outside production (local development and tests). Anything
 * a browser would run or that is not a plain web address (javascript:, data:, vbscript:, file:, ftp:,
 * relative paths, `*` and wildcard hosts, credentials in the URL) is refused.
 */

/** Why the value is not an acceptable URL, or null when it is. The empty string is not a URL (callers decide whether it clears). */
export function checkUrlValue(value: string, allowHttp: boolean): string | null {
  const text = value.trim();
  if (text !== value) return 'must not start or end with spaces';
  if (text.includes('*')) return 'wildcards (*) are not allowed';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'must be an absolute URL';
  }
  if (url.protocol !== 'https:' && !(allowHttp && url.protocol === 'http:')) return allowHttp ? 'must be an http: or https: URL' : 'must be an https: URL';
  if (!url.hostname) return 'must name a host';
  if (url.username || url.password) return 'must not carry credentials';
  return null;
}

/** The first problem of a list of URLs, as "item i: reason", or null. */
export function checkUrlList(values: readonly string[], allowHttp: boolean): string | null {
  for (const [i, v] of values.entries()) {
    const problem = checkUrlValue(v, allowHttp);
    if (problem) return `item ${i} ${problem}`;
  }
  return null;
}
