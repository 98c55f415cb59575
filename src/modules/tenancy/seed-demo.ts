import { createHash } from 'node:crypto';
import type { DbOrTx } from '../../db/client.js';
import { assistants, uploads } from '../../db/schema.js';
import { enqueue } from '../../platform/jobs.js';
import { uploadKey, type BlobStorage } from '../../providers/storage/index.js';
import { INGEST_MAX_ATTEMPTS, INGEST_QUEUE } from '../vault/ingest/pipeline.js';
import { StartupError } from '../../shared/errors.js';
import { newId, newPublicId } from '../../shared/ids.js';
import { findUserByEmail, updateUser } from '../identity/identity.repository.js';
import { hashPassword } from '../identity/passwords.js';
import { moveInstitutionCredits, moveUserCredits } from './credits.repository.js';
import { insertAccount, insertInstitution, insertUser, upsertMembership } from './tenancy.repository.js';

export interface DemoResult {
  account: { id: string; name: string };
  assistants: Array<{ id: string; name: string; institution: string }>;
  files: Array<{ id: string; name: string; institution: string }>;
  institutions: Array<{ id: string; name: string; publicId: string; ltiContextId: string }>;
  logins: Array<{ role: string; email: string; password: string }>;
}

const DEMO_PASSWORD = 'demo-password-1';

/** Course material per institution: a newcomer can ask a grounded question at once. */
const DEMO_FILES: Record<string, Array<{ name: string; title: string; text: string }>> = {
  physics: [
    {
      name: 'newtons-laws.md',
      title: "Newton's laws of motion",
      text: [
        "# Newton's laws of motion",
        '',
        "Newton's first law (inertia): a body stays at rest or moves in a straight line at constant speed unless a net force acts on it.",
        '',
        "Newton's second law: the net force on a body equals its mass times its acceleration (F = m a). Force is measured in newtons; one newton accelerates one kilogram by one metre per second squared.",
        '',
        "Newton's third law: when one body exerts a force on a second body, the second exerts a force equal in size and opposite in direction on the first.",
      ].join('\n'),
    },
    {
      name: 'thermodynamics.md',
      title: 'Laws of thermodynamics',
      text: [
        '# The laws of thermodynamics',
        '',
        'The zeroth law defines thermal equilibrium: two bodies each in equilibrium with a third are in equilibrium with each other.',
        '',
        'The first law is the conservation of energy: the change of internal energy equals the heat added minus the work done by the system.',
        '',
        'The second law says that the entropy of an isolated system never decreases; heat flows by itself only from hot to cold.',
      ].join('\n'),
    },
  ],
  history: [
    {
      name: 'peloponnesian-war.md',
      title: 'The Peloponnesian War',
      text: [
        '# The Peloponnesian War (431–404 BC)',
        '',
        'The Peloponnesian War was fought between Athens and its empire and the Peloponnesian League led by Sparta.',
        '',
        'Thucydides, an Athenian general, wrote its history; he blamed the war on the growth of Athenian power and the fear it caused in Sparta.',
        '',
        'The war ended in 404 BC when Athens surrendered to Sparta after the defeat of its fleet at Aegospotami.',
      ].join('\n'),
    },
  ],
};

/**
 * A demo world a newcomer can try every route with: one account, two institutions with branding,
 * credits and an LTI context id, an account admin, and per institution an admin, two users, a system
 * assistant and (given the blob storage) a few course files queued for ingestion.
 * Running it twice is harmless: it refuses when the demo account admin already exists.
 */
export async function seedDemo(db: DbOrTx, storage?: BlobStorage): Promise<DemoResult> {
  const adminEmail = 'demo.owner@example.com';
  if (await findUserByEmail(db, adminEmail)) throw new StartupError(`The demo data already exists (${adminEmail}); nothing was changed.`);

  const passwordHash = await hashPassword(DEMO_PASSWORD);
  const account = await insertAccount(db, { id: newId(), name: 'Demo University', managerEmail: adminEmail, lastActivityAt: new Date() });
  const owner = await insertUser(db, { id: newId(), accountId: account.id, email: adminEmail, passwordHash, fname: 'Olivia', lname: 'Owner', role: 'accountadmin' });
  // Opening balances are top-ups like any other: each a credit_ledger row, so balances = sum of the ledger.
  await moveUserCredits(db, owner.id, 100, { kind: 'topup', note: 'demo opening balance' });
  const logins: DemoResult['logins'] = [{ role: 'accountadmin', email: adminEmail, password: DEMO_PASSWORD }];
  const institutions: DemoResult['institutions'] = [];
  const seededAssistants: DemoResult['assistants'] = [];
  const files: DemoResult['files'] = [];

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
    let adminId = owner.id;
    for (const p of people) {
      const email = `${p.local}@example.com`;
      const user = await insertUser(db, { id: newId(), accountId: account.id, email, passwordHash, fname: p.fname, lname: p.lname, currentInstitutionId: inst.id });
      await upsertMembership(db, user.id, inst.id, p.role);
      if (p.role === 'admin') adminId = user.id;
      logins.push({ role: `${p.role} (${spec.slug})`, email, password: DEMO_PASSWORD });
    }

    // A system assistant every member can use, with every tool.
    const assistantId = newId();
    const assistantName = `${spec.ainame} tutor`;
    await db.insert(assistants).values({
      id: assistantId,
      accountId: account.id,
      institutionId: inst.id,
      ownerUserId: null,
      name: assistantName,
      description: `Answers questions about the ${spec.slug} course material.`,
      instructions: `You are a patient ${spec.slug} tutor. Answer from the course documents, cite them, and say when they do not cover a question.`,
      institutionShared: true,
      rememberHistory: 1,
      historyCount: 5,
      assistantToolMode: 'all',
    });
    seededAssistants.push({ id: assistantId, name: assistantName, institution: inst.id });

    // Course files, stored and queued for ingestion like an upload: the server's workers index them at start.
    if (storage) {
      for (const f of DEMO_FILES[spec.slug] ?? []) {
        const id = newId();
        const bytes = Buffer.from(f.text, 'utf8');
        const key = uploadKey(id);
        await storage.put(key, bytes);
        const now = new Date();
        await db.insert(uploads).values({
          id,
          originalname: f.name,
          filesize: bytes.length,
          mimetype: 'text/markdown',
          fileTitle: f.title,
          scope: 'instance',
          ownerUserId: adminId,
          institutionId: inst.id,
          accountId: account.id,
          status: 'processing',
          stage: 'queued',
          storageKey: key,
          sha256: createHash('sha256').update(bytes).digest('hex'),
          createdAt: now,
          updatedAt: now,
        });
        await enqueue(db, INGEST_QUEUE, { uploadId: id }, { runAt: now, maxAttempts: INGEST_MAX_ATTEMPTS });
        files.push({ id, name: f.name, institution: inst.id });
      }
    }
  }
  if (institutions[0]) await updateUser(db, owner.id, { currentInstitutionId: institutions[0].id }, new Date());
  return { account: { id: account.id, name: account.name }, institutions, logins, assistants: seededAssistants, files };
}
