/**
 * Rows of content search. Every authenticated principal may search (200): what it searches is its
 * own eligible scope (personal files, its current institution's files, its account's shared files),
 * so the leak check (no marker of account A to account B, none of A1 to A2's member) is the proof
 * that nobody reaches another's files. A selection of foreign ids is dropped silently: 200, never 403.
 * The single-method evaluation switch is the superadmin's only.
 */
import assert from 'node:assert/strict';
import { authed, type Row } from './fixture.js';

const all = authed({ otherAccountUser: 200, otherInstitutionMember: 200, member: 200, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 });

export const rows: Row[] = [
  {
    route: 'POST /api/user/files/search-content',
    expect: all,
    request: () => ({ payload: { query: 'speed of light inertial frame' } }),
    check: (res, { w, principal }) => {
      const ids = (res.json().results as Array<{ uploadId: string }>).map((r) => r.uploadId);
      if (principal === 'member') assert.ok(ids.includes(w.records.fileA1.id) && ids.includes(w.records.personalFile.id));
      if (principal === 'institutionAdmin') assert.ok(ids.includes(w.records.fileA1.id) && !ids.includes(w.records.personalFile.id));
    },
  },
  {
    route: 'POST /api/user/files/search-content',
    variant: 'selectedUploadIds of A1 records',
    expect: all,
    request: ({ w }) => ({ payload: { query: 'speed of light', selectedUploadIds: [w.records.fileA1.id, w.records.personalFile.id, 'not-an-id'] } }),
    check: (res, { principal }) => {
      const body = res.json() as { uploadCount: number };
      if (principal === 'otherAccountUser' || principal === 'otherInstitutionMember' || principal === 'superadmin') assert.equal(body.uploadCount, 0);
    },
  },
  {
    route: 'POST /api/user/files/search-content',
    variant: 'single-method switch',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 403, otherAccountAdmin: 403, superadmin: 200 }),
    request: () => ({ payload: { query: 'speed of light', method: 'lexical' } }),
  },
];
