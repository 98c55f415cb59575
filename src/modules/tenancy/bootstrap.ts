import type { AppContext } from '../../context.js';
import type { DbOrTx } from '../../db/client.js';
import { newId } from '../../shared/ids.js';
import { endCredentials } from '../identity/credentials.js';
import { findUserByEmail, updateUser } from '../identity/identity.repository.js';
import { hashPassword } from '../identity/passwords.js';
import { countUsers, insertAccount, insertUser } from './tenancy.repository.js';

/**
 * Creates a superadmin (in a "Platform" account), or promotes an existing user of that e-mail and
 * resets their password. Used by BOOTSTRAP_ADMIN_* on an empty database and by `cli create-admin`.
 */
export async function createSuperadmin(db: DbOrTx, email: string, password: string, now = new Date()): Promise<{ id: string; created: boolean }> {
  const passwordHash = await hashPassword(password);
  const existing = await findUserByEmail(db, email);
  if (existing) {
    await updateUser(db, existing.id, { role: 'superadmin', passwordHash, status: 'active' }, now);
    // a password reset: the sessions, trusted devices and open MFA challenges of the old one end with it
    // (a running server's auth cache re-reads them within AUTH_CACHE_TTL_SECONDS)
    await endCredentials(db, existing.id, 'password reset (create-admin)', now);
    return { id: existing.id, created: false };
  }
  const account = await insertAccount(db, { id: newId(), name: 'Platform', managerEmail: email });
  const user = await insertUser(db, {
    id: newId(),
    accountId: account.id,
    email,
    passwordHash,
    fname: 'Platform',
    lname: 'Admin',
    role: 'superadmin',
  });
  return { id: user.id, created: true };
}

export async function ensureBootstrapAdmin(ctx: AppContext): Promise<void> {
  const { bootstrapAdminEmail: email, bootstrapAdminPassword: password } = ctx.config;
  if (!email || !password) return;
  if ((await countUsers(ctx.db)) > 0) return;
  await createSuperadmin(ctx.db, email, password, ctx.clock.now());
  ctx.log.info({ email }, 'bootstrap superadmin created');
}
