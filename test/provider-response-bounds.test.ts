/**
 * What a model provider sends is read through bounds, in size and in time: a chat completion, a stream, an
 * embeddings answer and the body of an error answer (which the SDK reads for its message). A provider
 * answering with far more than any answer needs, or with a body that never ends, fails the call (an
 * UpstreamError naming the bound) and has its connection closed; it cannot fill the process's memory.
 * The provider is a real local HTTP server speaking the OpenAI wire format; the bodies sent are real
 * (16 MiB and more over loopback): the limits are not configuration.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { OpenAiCompatibleEmbedder } from '../src/providers/embeddings/openai-compatible.js';
import { OpenAiCompatibleChatModel } from '../src/providers/llm/openai-compatible.js';
import { UpstreamError, type ChatRequest, type ChatStreamEvent, type LlmConfig } from '../src/providers/llm/types.js';
import type { EmbeddingsConfig } from '../src/providers/embeddings/types.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { waitFor } from './support/realtime.js';

const MiB = 1024 * 1024;

const ask = (question: string, extra: Partial<ChatRequest> = {}): ChatRequest => ({
  purpose: 'answer',
  messages: [{ role: 'user', content: question }],
  maxTokens: 100,
  ...extra,
});

async function collect(events: AsyncIterable<ChatStreamEvent>): Promise<ChatStreamEvent[]> {
  const out: ChatStreamEvent[] = [];
  for await (const e of events) out.push(e);
  return out;
}

/** An UpstreamError whose message matches `pattern`. */
const upstream = (pattern: RegExp) => (err: unknown) => {
  assert.ok(err instanceof UpstreamError, `an UpstreamError, got ${String(err)}`);
  assert.match(err.message, pattern);
  return true;
};

let stub: OpenAiStub;
before(async () => {
  stub = await startOpenAiStub();
});
after(() => stub.close());

/** The body the stub recorded last, once the response it belongs to ended. */
async function lastBody(count: number) {
  await waitFor(() => stub.bodies.length > count, 'the oversized body to end');
  return stub.bodies.at(-1)!;
}

describe('chat model: the size of what the provider sends is bounded', () => {
  const config = (over: Partial<LlmConfig> = {}): LlmConfig => ({
    provider: 'openai-compatible',
    baseUrl: stub.baseUrl,
    model: 'stub-model',
    timeoutMs: 10_000,
    maxRetries: 0,
    ...over,
  });

  test('a completion larger than 16 MiB is an UpstreamError naming the limit; one within it, or within a larger budget\'s, is the answer', async () => {
    const model = new OpenAiCompatibleChatModel(config());
    stub.padNextAnswer(16 * MiB);
    await assert.rejects(model.complete(ask('too long')), upstream(/^The model provider's answer was larger than 16 MiB/u));

    stub.padNextAnswer(15 * MiB);
    assert.equal((await model.complete(ask('long but fine'))).text, 'long but fine');
    // a budget of 200,000 tokens may need more: 24.4 MiB
    stub.padNextAnswer(20 * MiB);
    assert.equal((await model.complete(ask('a big budget', { maxTokens: 200_000 }))).text, 'a big budget');
  });

  test('a stream that keeps sending is cut past 16 MiB: an UpstreamError naming the limit, and the connection closed', async () => {
    const model = new OpenAiCompatibleChatModel(config());
    const seen = stub.bodies.length;
    stub.floodNextStream(64 * MiB);
    const deltas: string[] = [];
    await assert.rejects(
      (async () => {
        for await (const e of model.stream(ask('flood'))) if (e.type === 'delta') deltas.push(e.text);
      })(),
      upstream(/^The model provider's stream was larger than 16 MiB/u),
    );
    assert.ok(deltas.length > 0, 'the chunks within the limit were read');
    const body = await lastBody(seen);
    assert.equal(body.hungUp, true, 'the client closed the connection');
    assert.ok(body.sent < 32 * MiB, `the provider could send ${body.sent} bytes`);

    // a budget of 20,000 tokens may stream more: 1 KiB a token
    stub.floodNextStream(64 * MiB);
    await assert.rejects(collect(model.stream(ask('flood', { maxTokens: 20_000 }))), upstream(/^The model provider's stream was larger than 19\.5 MiB/u));
  });

  test('an error answer whose body never ends: cut past 16 MiB (completion and stream)', async () => {
    const model = new OpenAiCompatibleChatModel(config());
    for (const call of [() => model.complete(ask('error flood')), () => collect(model.stream(ask('error flood')))]) {
      const seen = stub.bodies.length;
      stub.failNextWithBody(500, { floodBytes: 64 * MiB });
      await assert.rejects(call(), upstream(/^The model provider's error answer \(HTTP 500\) was larger than 16 MiB/u));
      assert.equal((await lastBody(seen)).hungUp, true, 'the client closed the connection');
    }
  });

  test('an error answer whose body trickles: it must come within timeoutMs of its headers (completion and stream)', async () => {
    const model = new OpenAiCompatibleChatModel(config({ timeoutMs: 300 }));
    for (const call of [() => model.complete(ask('error trickle')), () => collect(model.stream(ask('error trickle')))]) {
      const seen = stub.bodies.length;
      stub.failNextWithBody(500, { trickleMs: 5000 });
      const started = Date.now();
      await assert.rejects(call(), upstream(/within 300 ms of starting it/u));
      assert.ok(Date.now() - started < 3000, `gave up at the timeout, not when the body ended (${Date.now() - started} ms)`);
      assert.equal((await lastBody(seen)).hungUp, true, 'the client closed the connection');
    }
  });
});

describe('embedder: the size and time of what the provider sends are bounded', () => {
  const config = (over: Partial<EmbeddingsConfig> = {}): EmbeddingsConfig => ({
    provider: 'openai-compatible',
    baseUrl: stub.baseUrl,
    model: 'stub-embedding',
    dimensions: 8,
    batchSize: 16,
    timeoutMs: 10_000,
    maxRetries: 0,
    ...over,
  });

  test('an answer larger than 64 MiB is an UpstreamError naming the limit; one within it is the vectors', async () => {
    const embedder = new OpenAiCompatibleEmbedder(config());
    const seen = stub.bodies.length;
    stub.padNextAnswer(80 * MiB);
    await assert.rejects(embedder.embed(['alpha beta']), upstream(/^The embedding provider's answer was larger than 64 MiB/u));
    assert.equal((await lastBody(seen)).hungUp, true, 'the client closed the connection');
    stub.padNextAnswer(60 * MiB);
    const [vector] = await embedder.embed(['alpha beta']);
    assert.equal(vector!.length, 8);

    // a batch of 1,100 texts of 1,000 numbers may need more: 64 bytes a number
    stub.padNextAnswer(80 * MiB);
    await assert.rejects(
      new OpenAiCompatibleEmbedder(config({ batchSize: 1100, dimensions: 1000 })).embed(['alpha beta']),
      upstream(/^The embedding provider's answer was larger than 67\.1 MiB, the most read of a batch of 1100 texts of 1000 numbers/u),
    );
  });

  test('the body of an answer, and of an error answer, must come within timeoutMs of its headers', async () => {
    const embedder = new OpenAiCompatibleEmbedder(config({ timeoutMs: 300 }));
    stub.stallNextBody(100);
    assert.equal((await embedder.embed(['a little late']))[0]!.length, 8);

    stub.stallNextBody(5000);
    let started = Date.now();
    await assert.rejects(embedder.embed(['stalled body']), upstream(/within 300 ms of starting it/u));
    assert.ok(Date.now() - started < 3000, `gave up at the timeout, not when the body came (${Date.now() - started} ms)`);

    stub.failNextWithBody(500, { trickleMs: 5000 });
    started = Date.now();
    await assert.rejects(embedder.embed(['error trickle']), upstream(/within 300 ms of starting it/u));
    assert.ok(Date.now() - started < 3000, `gave up at the timeout, not when the body ended (${Date.now() - started} ms)`);
  });
});
