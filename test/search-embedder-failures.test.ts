/**
 * An embedding provider that fails, or answers but answers wrongly (vectors of the wrong size, a wrong
 * count, far more bytes than an answer needs), is an upstream failure on every route that embeds: the
 * contract's 502 UPSTREAM_FAILED, never a 500 INTERNAL. The provider is a real local HTTP server speaking the OpenAI wire format.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { buildWorld, type World } from './authz/fixture.js';
import { startOpenAiStub, type EmbeddingsHandler, type OpenAiStub } from './support/openai-stub.js';
import { waitFor } from './support/realtime.js';

let w: World;
let stub: OpenAiStub;

describe('search and chunk edits: embedding provider failures are 502s', () => {
  before(async () => {
    stub = await startOpenAiStub();
    w = await buildWorld({
      env: {
        EMBEDDINGS_PROVIDER: 'openai-compatible',
        EMBEDDINGS_BASE_URL: stub.baseUrl,
        EMBEDDINGS_MODEL: 'stub-embedding',
        EMBEDDINGS_MAX_RETRIES: '0',
        QANDA_RATE_LIMIT_PER_MINUTE: '1000',
        SEARCH_RATE_LIMIT_PER_MINUTE: '1000',
      },
    });
    await w.database.db.execute(sql`update institutions set credits = 100000, max_completion_tokens = 50 where id = ${w.a1.id}`);
  });
  after(async () => {
    await w?.close();
    await stub?.close();
  });

  const wrongSize: EmbeddingsHandler = ({ texts }) => texts.map(() => [1, 0, 0]);
  /** A request made while the provider answers with `handler`; the default answers come back after it. */
  const answeredBy = async <T>(handler: EmbeddingsHandler, request: () => Promise<T>): Promise<T> => {
    stub.setEmbeddingsHandler(handler);
    try {
      return await request();
    } finally {
      stub.setEmbeddingsHandler(null);
    }
  };
  const expectUpstreamFailure = (res: { statusCode: number; body: string; json(): { error: { code: string } } }) => {
    assert.equal(res.statusCode, 502, `got ${res.statusCode} ${res.body}`);
    assert.equal(res.json().error.code, 'UPSTREAM_FAILED');
  };

  const search = () => w.app.inject({ method: 'POST', url: '/api/user/files/search-content', headers: w.headersFor('member'), payload: { query: 'speed of light' } });

  test('sanity: search works through the stub embedder', async () => {
    const res = await search();
    assert.equal(res.statusCode, 200, res.body);
    assert.ok(res.json().results.length > 0, 'results found');
  });

  test('search-content: a provider that is down is a 502', async () => {
    stub.failNext(1, 503);
    const res = await search();
    assert.equal(res.statusCode, 502, res.body);
    assert.equal(res.json().error.code, 'UPSTREAM_FAILED', 'code');
  });

  test('search-content: vectors of the wrong size are an upstream failure (502), not a 500', async () => {
    expectUpstreamFailure(await answeredBy(wrongSize, search));
  });

  test('search-content: a wrong number of vectors is an upstream failure (502), not a 500', async () => {
    expectUpstreamFailure(await answeredBy(() => [], search));
  });

  test('search-content: an answer larger than 64 MiB is an upstream failure (502); the connection is closed and the next search works', async () => {
    const seen = stub.bodies.length;
    stub.padNextAnswer(80 * 1024 * 1024); // the vectors asked for, followed by 80 MiB of spaces: valid JSON
    expectUpstreamFailure(await search());
    await waitFor(() => stub.bodies.length > seen, 'the oversized answer to end');
    assert.equal(stub.bodies.at(-1)!.hungUp, true, 'the server closed the connection to the provider');
    const res = await search();
    assert.equal(res.statusCode, 200, res.body);
  });

  test('Q&A: vectors of the wrong size are an upstream failure (502), not a 500', async () => {
    const ask = () => w.app.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: w.headersFor('member'), payload: { id: 1, inputs: ['What is the speed of light?'] } });
    expectUpstreamFailure(await answeredBy(wrongSize, ask));
  });

  test('PUT /api/user/embedding/{id}: vectors of the wrong size are a 502 and nothing changes', async () => {
    const url = `/api/user/embedding/${w.records.personalFile.chunkId}`;
    const before = await w.app.inject({ method: 'GET', url, headers: w.headersFor('member') });
    assert.equal(before.statusCode, 200, before.body);
    expectUpstreamFailure(await answeredBy(wrongSize, () => w.app.inject({ method: 'PUT', url, headers: w.headersFor('member'), payload: { sanitizedText: 'New text.' } })));
    const afterwards = await w.app.inject({ method: 'GET', url, headers: w.headersFor('member') });
    assert.deepEqual(afterwards.json(), before.json(), 'the chunk is unchanged');
  });
});
