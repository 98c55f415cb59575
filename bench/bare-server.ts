// The baselines of the benchmarks: bare Fastify routes with the same logger level as the app.
//   GET  /hello     the ceiling of every ratio (the "bare Fastify hello")
//   POST /branding  what a POST lookup costs in Fastify itself: a JSON body read and parsed, validated
//                   by a one-field schema (a UUID), and a constant pre-serialized answer. It shows how
//                   much of POST /api/agent/branding's gap to the ceiling is Fastify's body pipeline.
import Fastify from 'fastify';

const app = Fastify({ logger: { level: 'warn' } });
app.get('/hello', async () => ({ success: true, hello: 'world' }));
const branding = JSON.stringify({ picture: 'https://cdn.example/a.png', picture_animated: '', picture_bg: '', picture_dark_bg: '', voice_agent_id: '', about: 'Benchmarks', ainame: 'Bench', status: 'active' });
app.post(
  '/branding',
  { schema: { body: { type: 'object', required: ['publicId'], additionalProperties: false, properties: { publicId: { type: 'string', format: 'uuid' } } } } },
  async (_request, reply) => reply.type('application/json; charset=utf-8').send(branding),
);
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
console.log('bare ready');
