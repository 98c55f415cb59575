import { forbidden } from '../../shared/errors.js';
import type { Principal } from '../tenancy/permissions.js';

/**
 * Who may read what in the MFA module, decided here. Codes, challenges and trusted devices are always
 * the caller's own (the repository queries are keyed by the caller's user id); the one shared thing
 * is the development outbox, which holds every user's codes.
 */

/** The development outbox shows every user's MFA codes: superadmins only. */
export function assertOutboxReader(p: Principal): void {
  if (p.role !== 'superadmin') throw forbidden('Only a superadmin may read the development outbox');
}
