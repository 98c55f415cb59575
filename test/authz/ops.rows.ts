/** Rows of the operational and public routes: health, readiness, OpenAPI, docs, metrics, dev outbox. */
import assert from 'node:assert/strict';
import { authed, everyone, type Row } from './fixture.js';

const publicGet = (route: string, status = 200): Row => ({ route, expect: everyone(status), request: () => ({}) });

const METRICS_TODO = 'issue 7 row 12: /metrics behind a token by configuration (METRICS_TOKEN set in the matrix world); today it is public';
const OUTBOX_TODO = 'issue 7 row 3: the dev outbox needs a superadmin (and DEV_OUTBOX=true); today it answers anyone';

export const rows: Row[] = [
  publicGet('GET /healthz'),
  publicGet('GET /readyz'),
  {
    route: 'GET /openapi.json',
    expect: everyone(200),
    request: () => ({}),
    check: (res) => assert.equal(res.json().openapi, '3.1.0'),
  },
  // Swagger UI: static pages, public by design (they show the same document as /openapi.json).
  publicGet('GET /docs'),
  // Fastify reports the trailing-slash twin of the prefixed docs root only as its HEAD route.
  { route: 'HEAD /docs/', expect: everyone(200), request: () => ({}) },
  publicGet('GET /docs/static/index.html', 302),
  publicGet('GET /docs/static/swagger-initializer.js'),
  publicGet('GET /docs/json'),
  publicGet('GET /docs/yaml'),
  { route: 'GET /docs/static/*', expect: everyone(200), request: () => ({ params: { '*': 'swagger-ui.css' } }) },
  {
    // Behind a static token by configuration: no principal's access token is that token.
    route: 'GET /metrics',
    expect: everyone(401),
    todo: { anonymous: METRICS_TODO, garbage: METRICS_TODO, expired: METRICS_TODO, revoked: METRICS_TODO, otherAccountUser: METRICS_TODO, otherInstitutionMember: METRICS_TODO, member: METRICS_TODO, institutionAdmin: METRICS_TODO, accountAdmin: METRICS_TODO, otherAccountAdmin: METRICS_TODO, superadmin: METRICS_TODO },
    request: () => ({}),
  },
  {
    route: 'GET /api/dev/outbox',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 403, otherAccountAdmin: 403, superadmin: 200 }),
    todo: { anonymous: OUTBOX_TODO, garbage: OUTBOX_TODO, expired: OUTBOX_TODO, revoked: OUTBOX_TODO, otherAccountUser: OUTBOX_TODO, otherInstitutionMember: OUTBOX_TODO, member: OUTBOX_TODO, institutionAdmin: OUTBOX_TODO, accountAdmin: OUTBOX_TODO, otherAccountAdmin: OUTBOX_TODO },
    request: () => ({ query: { limit: '5' } }),
  },
];
