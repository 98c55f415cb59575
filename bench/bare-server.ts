// The baselines of the benchmarks: bare Fastify routes with the same logger level as the app.
//   GET  /hello     the ceiling of every ratio (the "bare Fastify hello")
//   POST /branding  what a POST lookup costs in Fastify itself: a JSON body read and parsed, validated
//                   by a one-field schema (a UUID), and a constant pre-serialized answer. It shows how
//                   much of POST /api/agent/branding's gap to the ceiling is Fastify's body pipeline.
//   POST /branding-headers  the same, answered with the headers the app's branding answer carries (helmet's,
//                   cache-control, an ETag, a request id): what a POST lookup costs in Fastify with them, the
//                   floor of the app's route before any of its own hooks or work.
// With RAW_PORT, also a node:http server without any framework on that port, answering every POST like
// the app's branding route does: the body read and parsed, its publicId checked, and the same answer with
// the same headers (helmet's, cache-control, an ETag, a request id). It is the floor of a POST's cost in
// Node itself on this machine, whatever framework or app code sits on top.
import { createServer } from 'node:http';
import Fastify from 'fastify';
import { staticSecurityHeaders } from '../src/http/security-headers.js';

const app = Fastify({ logger: { level: 'warn' } });
app.get('/hello', async () => ({ success: true, hello: 'world' }));
const branding = JSON.stringify({ picture: 'https://cdn.example/a.png', picture_animated: '', picture_bg: '', picture_dark_bg: '', voice_agent_id: '', about: 'Benchmarks', ainame: 'Bench', status: 'active' });
app.post(
  '/branding',
  { schema: { body: { type: 'object', required: ['publicId'], additionalProperties: false, properties: { publicId: { type: 'string', format: 'uuid' } } } } },
  async (_request, reply) => reply.type('application/json; charset=utf-8').send(branding),
);
const brandingHeaders = { ...staticSecurityHeaders(0), 'cache-control': 'public, max-age=60', etag: '"Jg-z2FYNGbeSY8F9ci81-OnS5QF"' };
app.post(
  '/branding-headers',
  { schema: { body: { type: 'object', required: ['publicId'], additionalProperties: false, properties: { publicId: { type: 'string', format: 'uuid' } } } } },
  async (request, reply) => reply.headers(brandingHeaders).header('x-request-id', request.id).type('application/json; charset=utf-8').send(branding),
);
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });

if (process.env.RAW_PORT) {
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  const headers = {
    // the app's own helmet headers (HSTS off, its default), computed as the app computes them
    ...staticSecurityHeaders(0),
    'cache-control': 'public, max-age=60',
    etag: '"Jg-z2FYNGbeSY8F9ci81-OnS5QF"',
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(branding)),
  };
  let id = 0;
  const raw = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let publicId: unknown;
      try {
        publicId = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { publicId?: unknown }).publicId;
      } catch {
        publicId = undefined;
      }
      if (typeof publicId !== 'string' || !UUID.test(publicId)) {
        res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"bad request"}');
        return;
      }
      res.writeHead(200, { ...headers, 'x-request-id': `raw-${++id}` }).end(branding);
    });
  });
  raw.keepAliveTimeout = 72_000;
  await new Promise<void>((resolve) => raw.listen(Number(process.env.RAW_PORT), '127.0.0.1', resolve));
}
console.log('bare ready');
