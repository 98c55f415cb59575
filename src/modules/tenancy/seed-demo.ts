import type { DbOrTx } from '../../db/client.js';
import { newId, newPublicId } from '../../shared/ids.js';
import { findUserByEmail, updateUser } from '../identity/identity.repository.js';
import { hashPassword } from '../identity/passwords.js';
import { moveInstitutionCredits, moveUserCredits } from './credits.repository.js';
import { insertAccount, insertInstitution, insertUser, upsertMembership } from './tenancy.repository.js';

export interface DemoResult {
  account: { id: string; name: string };
  institutions: Array<{ id: string; name: string; publicId: string; ltiContextId: string }>;
  logins: Array<{ role: string; email: string; password: string }>;
}

const DEMO_PASSWORD = 'demo-password-1';

/**
 * A demo world a newcomer can try every route with: one account, two institutions with branding,
 * credits and an LTI context id, an account admin, and per institution an admin and two users.
 * Running it twice is harmless: it refuses when the demo account admin already exists.
 */
export async function seedDemo(db: DbOrTx): Promise<DemoResult> {
  const adminEmail = 'demo.owner@example.com';
  if (await findUserByEmail(db, adminEmail)) throw new Error(`The demo data already exists (${adminEmail}); nothing was changed.`);

  const passwordHash = await hashPassword(DEMO_PASSWORD);
  const account = await insertAccount(db, { id: newId(), name: 'Demo University', managerEmail: adminEmail, lastActivityAt: new Date() });
  const owner = await insertUser(db, { id: newId(), accountId: account.id, email: adminEmail, passwordHash, fname: 'Olivia', lname: 'Owner', role: 'accountadmin' });
  // Opening balances are top-ups like any other: each a credit_ledger row, so balances = sum of the ledger.
  await moveUserCredits(db, owner.id, 100, { kind: 'topup', note: 'demo opening balance' });
  const logins: DemoResult['logins'] = [{ role: 'accountadmin', email: adminEmail, password: DEMO_PASSWORD }];
  const institutions: DemoResult['institutions'] = [];

  const specs = [
    { slug: 'physics', name: 'Demo Physics', ainame: 'Newton', about: 'Answers questions about the physics course material.', poolCredits: true },
    { slug: 'history', name: 'Demo History', ainame: 'Herodotus', about: 'A guide through the history reading list.', poolCredits: false },
  ];
  for (const spec of specs) {
    const ltiContextId = `https://lms.example.com/courses/${spec.slug}`;
    const inst = await insertInstitution(db, {
      id: newId(),
      accountId: account.id,
      publicId: newPublicId(),
      name: spec.name,
      ainame: spec.ainame,
      about: spec.about,
      picture: `https://cdn.example.com/${spec.slug}/avatar.png`,
      pictureBg: `https://cdn.example.com/${spec.slug}/bg-light.jpg`,
      pictureDarkBg: `https://cdn.example.com/${spec.slug}/bg-dark.jpg`,
      pictureAnimated: '',
      voiceAgentId: `voice-${spec.slug}`,
      creditAward: 500,
      poolCredits: spec.poolCredits,
      maxFiles: 500,
      maxCompletionTokens: 1024,
      ltiContextIds: [ltiContextId],
      contactEmail: `${spec.slug}@example.com`,
    });
    await moveInstitutionCredits(db, inst.id, 10_000, { kind: 'topup', note: 'demo opening balance' });
    institutions.push({ id: inst.id, name: inst.name, publicId: inst.publicId, ltiContextId });
    await upsertMembership(db, owner.id, inst.id, 'admin');

    const people = [
      { role: 'admin' as const, fname: 'Ada', lname: 'Admin', local: `${spec.slug}.admin` },
      { role: 'user' as const, fname: 'Uma', lname: 'User', local: `${spec.slug}.user1` },
      { role: 'user' as const, fname: 'Ulf', lname: 'User', local: `${spec.slug}.user2` },
    ];
    for (const p of people) {
      const email = `${p.local}@example.com`;
      const user = await insertUser(db, { id: newId(), accountId: account.id, email, passwordHash, fname: p.fname, lname: p.lname, currentInstitutionId: inst.id });
      await upsertMembership(db, user.id, inst.id, p.role);
      logins.push({ role: `${p.role} (${spec.slug})`, email, password: DEMO_PASSWORD });
    }
  }
  if (institutions[0]) await updateUser(db, owner.id, { currentInstitutionId: institutions[0].id }, new Date());
  return { account: { id: account.id, name: account.name }, institutions, logins };
}
