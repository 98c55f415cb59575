import type { OutboxRow } from '../../providers/mail/outbox.js';
import type { TrustedDeviceRow } from './mfa.repository.js';

/** The spec's Trusted device: exactly id, deviceId, sourceIp, ua, createdAt, lastUsedAt, expiresAt. */
export function presentDevice(d: TrustedDeviceRow) {
  return {
    id: d.id,
    deviceId: d.deviceId,
    sourceIp: d.sourceIp,
    ua: d.ua,
    createdAt: d.createdAt.toISOString(),
    lastUsedAt: d.lastUsedAt.toISOString(),
    expiresAt: d.expiresAt.toISOString(),
  };
}

export function presentOutboxMessage(m: OutboxRow) {
  return { id: m.id, to: m.to, subject: m.subject, text: m.text, html: m.html, created: m.createdAt.toISOString() };
}
