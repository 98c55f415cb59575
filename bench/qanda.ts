/**
 * Q&A pipeline figures (issue 9), all in this one process on one node: the app on an in-memory PGlite
 * restored from the test template, the OpenAI wire-format stub with zero added latency as the
 * upstream, HTTP and socket.io-client as the client.
 *
 * 1. Pipeline overhead = end-to-end time of a request minus the time spent in the model provider
 *    (measured around the provider call inside the server), p50/p95 over sequential requests, without
 *    retrieval (ragIgnore) and with retrieval (lexical, over a vault of ingested files).
 * 2. Time from the upstream's first token (the provider yields its first delta inside the server) to
 *    the client's first RECEIVE_STREAM event, p50/p95.
 * 3. N concurrent streamed answers (default 1,000): every answer's chunks arrive, in order, and
 *    concatenate to its `outputs`.
 *
 *   npx tsx bench/qanda.ts [sequential=300] [concurrent=1000]
 */
import type { AddressInfo } from 'node:net';
import { Worker } from 'node:worker_threads';
import { sql } from 'drizzle-orm';
import { io as connect, type Socket } from 'socket.io-client';
import { rowsOf } from '../src/db/client.js';
import { createChatModel } from '../src/providers/llm/index.js';
import type { ChatModel, ChatRequest, ChatStreamEvent } from '../src/providers/llm/types.js';
import { startOpenAiStub } from '../test/support/openai-stub.js';
import { login, makeAccount, makeInstitution, makeUser, startTestApp } from '../test/support/app.js';
import { uploadOk, waitForIngestion } from '../test/support/uploads.js';

const sequential = Number(process.argv[2] ?? 300);
const concurrent = Number(process.argv[3] ?? 1000);

const stub = await startOpenAiStub();
const answer = Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ');
stub.setChatHandler(() => ({ content: answer, usage: { prompt_tokens: 200, completion_tokens: 60 } }));

/** Times spent inside the provider, per request (keyed by the question), and first-delta instants. */
const upstreamMs: number[] = [];
const firstDeltaAt = new Map<string, number>();
const lastQuestion = (r: ChatRequest) => r.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '';
const llmConfig = { provider: 'openai-compatible' as const, baseUrl: stub.baseUrl, model: 'stub-chat', timeoutMs: 30_000, maxRetries: 0 };
const real = createChatModel(llmConfig);
const timed: ChatModel = {
  provider: real.provider,
  defaultModel: real.defaultModel,
  async complete(request) {
    const t0 = performance.now();
    try {
      return await real.complete(request);
    } finally {
      upstreamMs.push(performance.now() - t0);
    }
  },
  async *stream(request): AsyncGenerator<ChatStreamEvent> {
    let first = true;
    for await (const ev of real.stream(request)) {
      if (first && ev.type === 'delta') {
        firstDeltaAt.set(lastQuestion(request), performance.now());
        first = false;
      }
      yield ev;
    }
  },
};

const t = await startTestApp({
  env: { LOG_LEVEL: 'silent', QANDA_RATE_LIMIT_PER_MINUTE: '1000000', LOGIN_RATE_LIMIT_PER_EMAIL: '100000', LOGIN_RATE_LIMIT_PER_IP: '100000', LLM_PROVIDER: 'openai-compatible', LLM_BASE_URL: stub.baseUrl, LLM_MODEL: 'stub-chat' },
  build: { providers: { chatModel: timed } },
});
// 1,000 simultaneous connections overflow the default accept backlog (511): raise it.
await t.app.listen({ port: 0, host: '127.0.0.1', backlog: 4096 });
const base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
const account = await makeAccount(t.database);
const inst = await makeInstitution(t.database, account.id, { maxCompletionTokens: 256 });
await t.database.db.execute(sql`update institutions set credits = 100000000 where id = ${inst.id}`);

const users = await Promise.all(Array.from({ length: 20 }, () => makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } })));
const tokens: string[] = [];
for (const u of users) tokens.push((await login(t.app, u.email)).accessToken);

// A vault to retrieve from: 20 files of ~12 paragraphs each.
const topics = ['gravity', 'entropy', 'optics', 'magnetism', 'relativity', 'quantum', 'acoustics', 'fluids', 'orbits', 'circuits'];
for (let f = 0; f < 20; f++) {
  const text = Array.from({ length: 12 }, (_, p) => `Paragraph ${p} about ${topics[(f + p) % topics.length]} and ${topics[(f * 3 + p) % topics.length]}: ${'measured values and careful notes. '.repeat(8)}`).join('\n\n');
  const up = await uploadOk(t.app, tokens[0]!, { name: `notes-${f}.txt`, content: text, type: 'text/plain' }, { scope: 'instance' });
  await waitForIngestion(t.app, tokens[0]!, up._id, 60_000);
}
const chunkCount = (await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from chunks`))[0]?.n ?? 0;

async function ask(token: string, body: Record<string, unknown>) {
  const res = await fetch(`${base}/api/ai/personal/qanda`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-access-token': token }, body: JSON.stringify(body) });
  const json = (await res.json()) as Record<string, any>;
  if (res.status !== 200) throw new Error(`${res.status} ${JSON.stringify(json)}`);
  return json;
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(2)} ms, p95 ${pct(xs, 95).toFixed(2)} ms (n=${xs.length})`;

async function overhead(ragIgnore: boolean): Promise<{ overhead: number[]; e2e: number[]; upstream: number[] }> {
  const o: number[] = [];
  const e: number[] = [];
  const u: number[] = [];
  for (let i = 0; i < sequential + 20; i++) {
    upstreamMs.length = 0;
    const t0 = performance.now();
    await ask(tokens[i % tokens.length]!, { id: i, inputs: [`Tell me about ${topics[i % topics.length]} please`], requestArgs: { ragIgnore } });
    const total = performance.now() - t0;
    if (i < 20) continue; // warm-up
    const up = upstreamMs.reduce((a, b) => a + b, 0);
    e.push(total);
    u.push(up);
    o.push(total - up);
  }
  return { overhead: o, e2e: e, upstream: u };
}

const noRetrieval = await overhead(true);
console.log(`pipeline overhead, no retrieval (ragIgnore):   ${fmt(noRetrieval.overhead)}; end-to-end ${fmt(noRetrieval.e2e)}; upstream ${fmt(noRetrieval.upstream)}`);
const withRetrieval = await overhead(false);
console.log(`pipeline overhead, with retrieval (lexical):    ${fmt(withRetrieval.overhead)}; end-to-end ${fmt(withRetrieval.e2e)}`);

// First token → first RECEIVE_STREAM, sequential streamed requests. The client socket lives in a worker
// thread (its own event loop, as a separate client would have): the server's work on the main loop
// (the rest of the stream, the embedded database) does not delay the client's reception. Instants are
// compared on the shared wall clock (performance.timeOrigin + performance.now()).
const sockets: Socket[] = [];
const open = async (token: string) => {
  const s = connect(base, { auth: { token }, transports: ['websocket'], reconnection: false });
  sockets.push(s);
  await new Promise<void>((resolve, reject) => {
    s.once('connect', () => resolve());
    s.once('connect_error', reject);
  });
  return s;
};
const worker = new Worker(
  `const { parentPort, workerData } = require('node:worker_threads');
   import('socket.io-client').then(({ io }) => {
     const s = io(workerData.base, { auth: { token: workerData.token }, transports: ['websocket'], reconnection: false });
     s.on('connect', () => parentPort.postMessage({ type: 'ready', socketId: s.id }));
     s.on('RECEIVE_STREAM', (e) => { if (e.index === 0) parentPort.postMessage({ type: 'first', id: e.id, at: performance.timeOrigin + performance.now() }); });
     parentPort.on('message', (m) => { if (m === 'stop') { s.disconnect(); parentPort.close(); } });
   });`,
  { eval: true, workerData: { base, token: tokens[0] } },
);
const workerSocketId = await new Promise<string>((resolve) => worker.on('message', (m: { type: string; socketId?: string }) => m.type === 'ready' && resolve(m.socketId!)));
const firstEventAt = new Map<number, number>();
worker.on('message', (m: { type: string; id?: number; at?: number }) => {
  if (m.type === 'first') firstEventAt.set(m.id!, m.at!);
});
const firstTokenLatency: number[] = [];
for (let i = 0; i < sequential + 20; i++) {
  const q = `stream question ${i}`;
  await ask(tokens[0]!, { id: i, inputs: [q], requestArgs: { ragIgnore: true, socketId: workerSocketId } });
  for (let k = 0; k < 100 && !firstEventAt.has(i); k++) await new Promise((r) => setTimeout(r, 1));
  const upstreamFirst = firstDeltaAt.get(q);
  const arrived = firstEventAt.get(i);
  if (i >= 20 && upstreamFirst !== undefined && arrived !== undefined) firstTokenLatency.push(arrived - (performance.timeOrigin + upstreamFirst));
}
worker.postMessage('stop');
console.log(`upstream first token -> first RECEIVE_STREAM:   ${fmt(firstTokenLatency)}`);

// N concurrent streamed answers: one socket per user, requests spread over them, told apart by id.
const userSockets = await Promise.all(tokens.map((tk) => open(tk)));
const received = new Map<number, Array<{ chunk: string; index: number; done: boolean }>>();
for (const s of userSockets) {
  s.on('RECEIVE_STREAM', (e: { id: number; chunk: string; index: number; done: boolean }) => {
    let list = received.get(e.id);
    if (!list) received.set(e.id, (list = []));
    list.push(e);
  });
}
const t0 = performance.now();
const results = await Promise.all(
  Array.from({ length: concurrent }, (_, i) => {
    const u = i % tokens.length;
    return ask(tokens[u]!, { id: 100_000 + i, inputs: [`concurrent ${i}`], requestArgs: { ragIgnore: true, socketId: userSockets[u]!.id } });
  }),
);
const wall = performance.now() - t0;
await new Promise((r) => setTimeout(r, 500));
let lost = 0;
let reordered = 0;
let mismatched = 0;
let failedStreams = 0;
results.forEach((r, i) => {
  const events = received.get(100_000 + i) ?? [];
  if (r.streamingFailed) failedStreams++;
  if (events.length === 0 || !events.at(-1)!.done) lost++;
  if (events.some((e, k) => e.index !== k)) reordered++;
  if (events.filter((e) => !e.done).map((e) => e.chunk).join('') !== r.outputs[0]) mismatched++;
});
const chunksTotal = [...received.values()].reduce((n, l) => n + l.length, 0);

const os = await import('node:os');
console.log(`machine: ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (1, 5, 15 min); vault ${chunkCount} chunks`);
console.log(`${concurrent} concurrent streamed answers in ${(wall / 1000).toFixed(1)} s: ${chunksTotal} events; lost ${lost}, reordered ${reordered}, not matching outputs ${mismatched}, streamingFailed ${failedStreams}`);

for (const s of sockets) s.disconnect();
await t.close();
await stub.close();
process.exit(lost + reordered + mismatched > 0 ? 1 : 0);
