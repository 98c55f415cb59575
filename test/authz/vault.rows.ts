/**
 * Rows of the vault: files, collections, chunks, sanitize. Targets: the member's instance records of
 * A1 (readable by A1's members, changeable by the owner and A1's admin), plus variants for the
 * member's personal records (owner only) and an account-scope file of account A (readable by every
 * member of an institution of A and by A's account admin; changeable by the owner and A's account
 * admin). Administrative roles do not widen what one reads: a superadmin enrolled nowhere sees none.
 * A record one may not see is 404 (existence never leaks); one seen but not changeable is 403.
 */
import assert from 'node:assert/strict';
import { multipartBody } from '../support/uploads.js';
import { authed, CANARY_A1, type Expect, type Row } from './fixture.js';

/** Records of A1's instance scope. */
const a1Members = (ok: number, outsider = 404): Expect =>
  authed({ otherAccountUser: outsider, otherInstitutionMember: outsider, member: ok, institutionAdmin: ok, accountAdmin: outsider, otherAccountAdmin: outsider, superadmin: outsider });
/** The member's personal records. */
const ownerOnly = (ok: number): Expect =>
  authed({ otherAccountUser: 404, otherInstitutionMember: 404, member: ok, institutionAdmin: 404, accountAdmin: 404, otherAccountAdmin: 404, superadmin: 404 });
/** Account-scope records of account A: read. */
const accountRead: Expect = authed({ otherAccountUser: 404, otherInstitutionMember: 200, member: 200, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 404 });
/** Account-scope records of account A: change (owner and the account admin; others who see it 403). */
const accountWrite: Expect = authed({ otherAccountUser: 404, otherInstitutionMember: 403, member: 200, institutionAdmin: 403, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 404 });

const uploadRequest = async (fields: Record<string, string>) => {
  const { payload, contentType } = await multipartBody(fields, { name: 'matrix.txt', content: `Uploaded in the matrix ${CANARY_A1}.`, type: 'text/plain' });
  return { payload, headers: { 'content-type': contentType } };
};

export const rows: Row[] = [
  // ───────────── files ─────────────
  {
    // Into A1's instance scope: members of A1 only; for anyone else "not a member" (403 for any id).
    route: 'POST /api/user/files',
    expect: a1Members(201, 403),
    request: async ({ w }) => uploadRequest({ scope: 'instance', institution: w.a1.id }),
  },
  {
    route: 'POST /api/user/files',
    variant: 'personal',
    expect: authed({ otherAccountUser: 201, otherInstitutionMember: 201, member: 201, institutionAdmin: 201, accountAdmin: 201, otherAccountAdmin: 201, superadmin: 201 }),
    request: async () => uploadRequest({ scope: 'personal' }),
  },
  {
    route: 'GET /api/user/files',
    expect: a1Members(200, 403),
    request: ({ w }) => ({ query: { scope: 'instance', institution: w.a1.id } }),
    check: (res, { w }) => assert.ok((res.json().data as Array<{ _id: string }>).some((f) => f._id === w.records.fileA1.id)),
  },
  {
    // Without filters: each sees its own places; the leak check proves nobody else's records come back.
    route: 'GET /api/user/files',
    variant: 'no filter',
    expect: authed({ otherAccountUser: 200, otherInstitutionMember: 200, member: 200, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 }),
    request: () => ({}),
  },
  {
    // Files of a collection of A1: a collection one cannot see lists nothing (the leak check proves it).
    route: 'GET /api/user/files',
    variant: 'collection of A1',
    expect: authed({ otherAccountUser: 200, otherInstitutionMember: 200, member: 200, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 }),
    request: ({ w }) => ({ query: { collection: w.records.collectionA1.id } }),
  },
  { route: 'GET /api/user/files/:id', expect: a1Members(200), request: ({ w }) => ({ params: { id: w.records.fileA1.id } }) },
  { route: 'GET /api/user/files/:id', variant: 'personal', expect: ownerOnly(200), request: ({ w }) => ({ params: { id: w.records.personalFile.id } }) },
  { route: 'GET /api/user/files/:id', variant: 'account scope', expect: accountRead, request: ({ w }) => ({ params: { id: w.records.accountFile.id } }) },
  { route: 'GET /api/user/files/:id/download', expect: a1Members(200), request: ({ w }) => ({ params: { id: w.records.fileA1.id } }) },
  { route: 'GET /api/user/files/:id/download', variant: 'personal', expect: ownerOnly(200), request: ({ w }) => ({ params: { id: w.records.personalFile.id } }) },
  {
    route: 'PATCH /api/user/files/:id',
    expect: a1Members(200),
    request: ({ w, principal }) => ({ params: { id: w.records.fileA1.id }, payload: { file_title: `Physics ${CANARY_A1} (${principal})` } }),
  },
  {
    route: 'PATCH /api/user/files/:id',
    variant: 'personal',
    expect: ownerOnly(200),
    request: ({ w, principal }) => ({ params: { id: w.records.personalFile.id }, payload: { file_title: `Mine ${CANARY_A1} (${principal})` } }),
  },
  {
    route: 'PATCH /api/user/files/:id',
    variant: 'account scope',
    expect: accountWrite,
    request: ({ w, principal }) => ({ params: { id: w.records.accountFile.id }, payload: { file_title: `Shared (${principal})` } }),
  },
  {
    // Into a collection of another tenant: "Collection not found" (404, the same as for an unknown id).
    route: 'PATCH /api/user/files/:id',
    variant: "into B1's collection",
    expect: a1Members(404),
    request: async ({ w }) => ({
      params: { id: w.records.fileA1.id },
      payload: { collection: (await w.makeCollection('otherAccountUser', { name: 'Beta shelf', scope: 'instance', institution: w.b1.id })).id },
    }),
  },
  {
    route: 'DELETE /api/user/files/:id',
    expect: a1Members(200),
    request: async ({ w, expected }) => ({
      params: { id: expected === 200 ? (await w.makeFile('member', { scope: 'instance', institution: w.a1.id })).id : w.records.fileA1.id },
    }),
  },
  {
    route: 'DELETE /api/user/files/:id',
    variant: 'account scope',
    expect: accountWrite,
    request: async ({ w, expected }) => ({
      params: { id: expected === 200 ? (await w.makeFile('member', { scope: 'account', institution: w.a1.id })).id : w.records.accountFile.id },
    }),
  },

  // ───────────── collections ─────────────
  {
    route: 'POST /api/user/collections/select-all-ids',
    expect: a1Members(200, 403),
    request: ({ w }) => ({ payload: { scope: 'instance', institution: w.a1.id } }),
    check: (res, { w }) => assert.ok((res.json().files as unknown[]).length >= 0 && JSON.stringify(res.json()).includes(w.records.fileA1.id)),
  },
  {
    route: 'POST /api/user/collections/select-all-ids',
    variant: 'parent',
    expect: a1Members(200),
    request: ({ w }) => ({ payload: { parent: w.records.collectionA1.id } }),
  },
  {
    route: 'POST /api/user/collection',
    expect: a1Members(201, 403),
    request: ({ w, principal }) => ({ payload: { name: `By ${principal}`, scope: 'instance', institution: w.a1.id } }),
  },
  {
    // Under a parent: the parent decides the place; a parent one cannot see is 404.
    route: 'POST /api/user/collection',
    variant: 'child of A1 collection',
    expect: a1Members(201),
    request: ({ w, principal }) => ({ payload: { name: `Child by ${principal}`, parent: w.records.collectionA1.id } }),
  },
  {
    route: 'GET /api/user/collections',
    expect: a1Members(200, 403),
    request: ({ w }) => ({ query: { scope: 'instance', institution: w.a1.id } }),
  },
  {
    route: 'GET /api/user/collections',
    variant: 'parent',
    expect: a1Members(200),
    request: ({ w }) => ({ query: { parent: w.records.collectionA1.id } }),
  },
  { route: 'GET /api/user/collection/:id', expect: a1Members(200), request: ({ w }) => ({ params: { id: w.records.collectionA1.id } }) },
  { route: 'GET /api/user/collection/:id', variant: 'personal', expect: ownerOnly(200), request: ({ w }) => ({ params: { id: w.records.personalCollection.id } }) },
  {
    route: 'PATCH /api/user/collection/:id',
    expect: a1Members(200),
    request: ({ w, principal }) => ({ params: { id: w.records.collectionA1.id }, payload: { name: `Lectures ${CANARY_A1} (${principal})` } }),
  },
  {
    route: 'PATCH /api/user/collection/:id',
    variant: 'personal',
    expect: ownerOnly(200),
    request: ({ w, principal }) => ({ params: { id: w.records.personalCollection.id }, payload: { name: `Private ${CANARY_A1} (${principal})` } }),
  },
  {
    route: 'DELETE /api/user/collection/:id',
    expect: a1Members(200),
    request: async ({ w, expected }) => ({
      params: { id: expected === 200 ? (await w.makeCollection('member', { name: 'Doomed', scope: 'instance', institution: w.a1.id })).id : w.records.collectionA1.id },
    }),
  },

  // ───────────── chunks ─────────────
  { route: 'GET /api/user/files/:id/chunks', expect: a1Members(200), request: ({ w }) => ({ params: { id: w.records.fileA1.id } }) },
  { route: 'GET /api/user/files/:id/chunks', variant: 'personal', expect: ownerOnly(200), request: ({ w }) => ({ params: { id: w.records.personalFile.id } }) },
  { route: 'GET /api/user/embedding/:id', expect: a1Members(200), request: ({ w }) => ({ params: { id: w.records.fileA1.chunkId } }) },
  { route: 'GET /api/user/embedding/:id', variant: 'account scope', expect: accountRead, request: ({ w }) => ({ params: { id: w.records.accountFile.chunkId } }) },
  {
    route: 'PUT /api/user/embedding/:id',
    expect: a1Members(200),
    request: ({ w, principal }) => ({ params: { id: w.records.fileA1.chunkId }, payload: { text: `Edited by ${principal}: ${CANARY_A1} light is fast.` } }),
  },
  {
    route: 'PUT /api/user/embedding/:id',
    variant: 'account scope',
    expect: accountWrite,
    request: ({ w, principal }) => ({ params: { id: w.records.accountFile.chunkId }, payload: { text: `Edited by ${principal}: the shared handbook.` } }),
  },
  { route: 'POST /api/user/embedding/:id/sanitize', expect: a1Members(200), request: ({ w }) => ({ params: { id: w.records.fileA1.chunkId } }) },
  { route: 'POST /api/user/embedding/:id/sanitize', variant: 'personal', expect: ownerOnly(200), request: ({ w }) => ({ params: { id: w.records.personalFile.chunkId } }) },
  { route: 'POST /api/user/embedding/:id/sanitize', variant: 'account scope', expect: accountWrite, request: ({ w }) => ({ params: { id: w.records.accountFile.chunkId } }) },
];
