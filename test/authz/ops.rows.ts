/** Rows of the operational and public routes: health, readiness, OpenAPI, docs, metrics, dev outbox. */
import assert from 'node:assert/strict';
import { authed, everyone, type Row } from './fixture.js';

const publicGet = (route: string, status = 200): Row => ({ route, expect: everyone(status), request: () => ({}) });


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
    request: () => ({}),
  },
  {
    route: 'GET /api/dev/outbox',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 403, otherAccountAdmin: 403, superadmin: 200 }),
    request: () => ({ query: { limit: '5' } }),
  },
];
