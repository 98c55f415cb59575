import type { DbOrTx } from '../../db/client.js';
import { closeOpenChallenges, revokeAllDevices } from '../mfa/mfa.repository.js';
import { revokeUserSessions } from './identity.repository.js';

/**
 * Everything that proves who a user is, ended at once: login sessions (but `keepSessionId`), trusted
 * devices and open MFA codes. Used when a password changes (by its owner or an admin) and when a user
 * is disabled, so that nothing obtained under the old credentials outlives them.
 */
export async function endCredentials(db: DbOrTx, userId: string, reason: string, now: Date, keepSessionId?: string): Promise<void> {
  await revokeUserSessions(db, userId, reason, now, keepSessionId);
  await revokeAllDevices(db, userId, now);
  await closeOpenChallenges(db, userId, now);
}
