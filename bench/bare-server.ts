// The baseline of bench/me-vs-bare.ts: a bare Fastify route with the same logger level as the app.
import Fastify from 'fastify';

const app = Fastify({ logger: { level: 'warn' } });
app.get('/hello', async () => ({ success: true, hello: 'world' }));
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
console.log('bare ready');
