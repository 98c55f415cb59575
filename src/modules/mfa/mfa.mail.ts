import type { MailMessage } from '../../providers/mail/types.js';
import type { ChallengePurpose } from './mfa.repository.js';

export interface CodeMailInput {
  to: string;
  fname: string;
  code: string;
  purpose: ChallengePurpose;
  serviceName: string;
  /** The user's current institution (instance), when known. */
  institution?: { name: string; ainame: string };
  expiresAt: Date;
  lifetimeMinutes: number;
  /** IANA zone of the user, for the clock time of expiry. */
  timezone: string;
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** "10:05 UTC" in the user's zone (UTC when the zone is unknown to this runtime). */
export function clockTime(at: Date, timezone: string): string {
  const format = (timeZone: string) =>
    new Intl.DateTimeFormat('en-GB', { timeZone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23', timeZoneName: 'short' }).format(at);
  try {
    return format(timezone);
  } catch {
    return format('UTC');
  }
}

/**
 * The code e-mail. The code appears as six consecutive digits in text and html, and nowhere else:
 * not in the subject, which is logged.
 */
export function composeCodeMail(input: CodeMailInput): MailMessage {
  const where = input.institution ? `${input.serviceName} (${input.institution.name}, assistant ${input.institution.ainame})` : input.serviceName;
  const subject = input.purpose === 'enroll' ? `Confirm two-step verification for ${input.serviceName}` : `Your ${input.serviceName} sign-in code`;
  const intro =
    input.purpose === 'enroll'
      ? `Use this code to turn on two-step verification for your account at ${where}:`
      : `Use this code to finish signing in to ${where}:`;
  const expiry = `The code expires in ${input.lifetimeMinutes} minutes, at ${clockTime(input.expiresAt, input.timezone)}, and works only once.`;
  const warning = 'If you did not ask for this code, ignore this message; someone may know your password, so consider changing it.';
  const greeting = input.fname ? `Hello ${input.fname},` : 'Hello,';

  const text = [greeting, '', intro, '', `    ${input.code}`, '', expiry, '', warning, '', `-- ${where}`, ''].join('\n');
  const html = [
    '<!doctype html><html><body style="font-family:sans-serif;line-height:1.5">',
    `<p>${escapeHtml(greeting)}</p>`,
    `<p>${escapeHtml(intro)}</p>`,
    `<p style="font-size:28px;font-weight:bold;letter-spacing:4px;font-family:monospace">${input.code}</p>`,
    `<p>${escapeHtml(expiry)}</p>`,
    `<p style="color:#666">${escapeHtml(warning)}</p>`,
    `<p style="color:#666">${escapeHtml(where)}</p>`,
    '</body></html>',
  ].join('\n');
  return { to: input.to, subject, text, html };
}
