import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { buildSanitizeRequest, createChatModel, SANITIZE_SYSTEM_PROMPT, sanitizePieces, stoppedBy } from '../src/providers/llm/index.js';
import { cleanText, LocalChatModel, NOTHING_FOUND } from '../src/providers/llm/local.js';
import { loadConfig } from '../src/config.js';
import { OpenAiCompatibleChatModel } from '../src/providers/llm/openai-compatible.js';
import { DEFAULT_STREAM_MAX_MS, UpstreamError, type ChatModel, type ChatRequest, type ChatStreamEvent, type LlmConfig } from '../src/providers/llm/types.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';

async function collect(events: AsyncIterable<ChatStreamEvent>): Promise<ChatStreamEvent[]> {
  const out: ChatStreamEvent[] = [];
  for await (const e of events) out.push(e);
  return out;
}

const ask = (question: string, extra: Partial<ChatRequest> = {}): ChatRequest => ({
  purpose: 'answer',
  messages: [
    { role: 'system', content: 'Answer from the passages.' },
    { role: 'user', content: question },
  ],
  ...extra,
});

describe('token encoding', () => {
  test('is not loaded by starting the app; counts the same loaded synchronously or by loadEncoding', async () => {
    // a fresh process: this one loaded the encoding already
    const { execFileSync } = await import('node:child_process');
    const script = `
      const { buildApp } = await import('./src/app.ts');
      const { loadConfig } = await import('./src/config.ts');
      const tokens = await import('./src/providers/llm/tokens.ts');
      const { mkdtempSync, rmSync } = await import('node:fs');
      const dir = mkdtempSync((await import('node:os')).tmpdir() + '/tokens-start-');
      const app = await buildApp({ config: loadConfig({ NODE_ENV: 'test', DATA_DIR: dir, LOG_LEVEL: 'silent', PGLITE_WORKER: 'false', INGEST_WORKERS: '0' }) });
      await app.ready();
      const atStart = tokens.encodingLoaded();
      await app.close();
      rmSync(dir, { recursive: true, force: true });
      const text = 'Überraschung! 42 tokens <|endoftext|> in one sentence.';
      const sync = tokens.countTextTokens(text); // no loadEncoding before: the synchronous fallback
      const asyncLoaded = await tokens.loadEncoding();
      console.log(JSON.stringify({ atStart, sync, viaLoad: asyncLoaded.countTokens(text, { disallowedSpecial: new Set() }), same: asyncLoaded === tokens.o200k() }));
    `;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: process.cwd(), encoding: 'utf8', env: { ...process.env, NODE_ENV: 'test' } });
    const result = JSON.parse(out.trim().split('\n').pop()!);
    const expected = countTokens('Überraschung! 42 tokens <|endoftext|> in one sentence.', { disallowedSpecial: new Set() });
    // one encoding for the process: loadEncoding answers the one the fallback loaded
    assert.deepEqual(result, { atStart: false, sync: expected, viaLoad: expected, same: true });
  });
});

describe('local chat model: sanitize', () => {
  test('repairs mojibake (also double-encoded) and leaves genuine characters alone', () => {
    assert.equal(cleanText('CafÃ© crÃ¨me costs 3â‚¬ â€“ itâ€™s â€œgoodâ€\u009d.'), 'Café crème costs 3€ – it’s “good”.');
    assert.equal(cleanText('NaÃ¯ve rÃ©sumÃ©Â\u00A0here.'), 'Naïve résumé here.');
    assert.equal(cleanText('100Â km and ÃƒÂ©tÃƒÂ© and æ—¥æœ¬'), '100 km and été and 日本');
    assert.equal(cleanText('Die „Straße“ in Köln – schön, Señor Ñandú, Œuvre ‘x’.'), 'Die „Straße“ in Köln – schön, Señor Ñandú, Œuvre ‘x’.');
  });

  test('drops U+FFFD, control and zero-width characters and normalises whitespace', () => {
    const dirty = '  Alpha\u0000 beta\t\t gamma\uFFFD.  \r\n\r\n\r\n\r\nSecond\u200B para\u0007graph.   \n\n\n';
    assert.equal(cleanText(dirty), 'Alpha beta gamma.\n\nSecond paragraph.');
  });

  test('re-joins lines hard-wrapped mid-sentence but keeps lists, headings and paragraphs', () => {
    const wrapped = [
      '# Setup',
      'The installer copies the files into the',
      'target folder and then restarts the',
      'service, which takes a minute.',
      '',
      'Steps:',
      '- open the panel',
      '- press start',
      'Done.',
    ].join('\n');
    assert.equal(
      cleanText(wrapped),
      ['# Setup', 'The installer copies the files into the target folder and then restarts the service, which takes a minute.', '', 'Steps:', '- open the panel', '- press start', 'Done.'].join('\n'),
    );
  });

  test('strips boilerplate lines and keeps every sentence of substance', () => {
    const substance = [
      'The warranty covers manufacturing defects for two years.',
      'Batteries are covered for six months.',
      'To make a claim, send the receipt to the support team.',
      'Repairs are usually finished within ten working days.',
      'Damage caused by water is not covered.',
    ];
    const page = (n: number, body: string[]) => ['ACME Warranty Handbook — Internal', ...body, `Page ${n} of 3`, String(n)];
    const text = [
      'Skip to content',
      'Home > Support > Warranty',
      'We use cookies to improve your experience. By continuing to browse you accept our use of cookies.',
      'Accept all cookies',
      ...page(1, [substance[0]!, substance[1]!]),
      '',
      ...page(2, [substance[2]!, '', substance[3]!]),
      'Share on Facebook',
      'Facebook Twitter LinkedIn',
      ...page(3, [substance[4]!]),
      '© 2024 ACME Corporation. All rights reserved.',
    ].join('\n');
    const cleaned = cleanText(text);
    for (const s of substance) assert.ok(cleaned.includes(s), `kept: ${s}`);
    for (const junk of ['Skip to content', 'Home >', 'cookies', 'Page ', 'ACME Warranty Handbook', 'Share on', 'Twitter', '©', 'All rights reserved']) {
      assert.ok(!cleaned.includes(junk), `removed: ${junk}\n---\n${cleaned}`);
    }
    assert.ok(!/^\d+$/mu.test(cleaned), 'no lone page numbers');
    assert.ok(!/\n\n\n/u.test(cleaned), 'at most one blank line');
    // Nothing of substance was summarised or shortened: the words are exactly those of the sentences.
    assert.equal(cleaned.replace(/\s+/gu, ' '), substance.join(' '));
  });

  test('does not remove content that only looks like boilerplate, and is idempotent', () => {
    const text = [
      'Copyright law protects the authors of original works.',
      'If a > b then the loop ends.',
      'You can manage cookie preferences in your browser settings.',
      'Result: 42',
    ].join('\n');
    assert.equal(cleanText(text), text);
    // A fragment of hard-wrapped sentences that happens to repeat is content, not a running footer.
    const wrapped = ['Alpha rises in', 'the north.', 'Beta rises in', 'the north.', 'Gamma rises in', 'the north.'].join('\n');
    assert.equal(cleanText(wrapped), ['Alpha rises in the north.', 'Beta rises in the north.', 'Gamma rises in the north.'].join('\n'));
    assert.equal(cleanText('Home / Products / Widgets\nWidgets are small.'), 'Widgets are small.');
    assert.equal(cleanText(cleanText(text)), cleanText(text));
  });

  test('the model sanitizes the last user message and counts tokens with o200k', async () => {
    const model = new LocalChatModel();
    const dirty = 'Skip to content\nThe report   is dueâ€™ on Friday.\n\n\n\nIt   covers Q3.';
    const req = buildSanitizeRequest(dirty);
    const res = await model.complete(req);
    assert.equal(res.text, 'The report is due’ on Friday.\n\nIt covers Q3.');
    assert.equal(res.model, 'local-extractive-v1');
    assert.equal(res.usage.outputTokens, countTokens(res.text));
    const framing = 3 + 3 * req.messages.length;
    assert.equal(res.usage.inputTokens, countTokens(SANITIZE_SYSTEM_PROMPT) + countTokens(dirty) + framing);
    assert.equal(res.usage.totalTokens, res.usage.inputTokens + res.usage.outputTokens);
  });
});

describe('local chat model: answer', () => {
  const model = new LocalChatModel();
  const passages = [
    { text: 'The office opens at 8 am. Parking is free for visitors in the north garage.', source: 'visitor-guide.pdf' },
    { text: 'Annual leave is 28 days per year. Unused leave days expire at the end of March.', source: 'hr-handbook.docx' },
    { text: 'The cafeteria serves lunch from noon.', source: 'cafeteria.txt' },
  ];

  test('composes the answer from the relevant passages and cites their sources', async () => {
    const res = await model.complete(ask('How many days of annual leave do I get, and when do unused days expire?', { context: passages }));
    assert.match(res.text, /^Based on your documents: /u);
    assert.ok(res.text.includes('Annual leave is 28 days per year.'));
    assert.ok(res.text.includes('Unused leave days expire at the end of March.'));
    assert.ok(res.text.includes('hr-handbook.docx'));
    assert.ok(!res.text.includes('visitor-guide.pdf') && !res.text.includes('cafeteria'), res.text);
    assert.equal(res.usage.outputTokens, countTokens(res.text));
    // the input is the messages: `context` is the structured copy of passages a prompt's messages carry, not more input
    const expectedInput = 3 + 2 * 3 + countTokens('Answer from the passages.') + countTokens('How many days of annual leave do I get, and when do unused days expire?');
    assert.equal(res.usage.inputTokens, expectedInput);
  });

  test('cites every passage it quotes', async () => {
    const res = await model.complete(ask('Where is visitor parking and when is lunch served?', { context: passages }));
    assert.ok(res.text.includes('north garage') && res.text.includes('lunch from noon'), res.text);
    assert.match(res.text, /\[1\] visitor-guide\.pdf/u);
    assert.match(res.text, /\[2\] cafeteria\.txt/u);
  });

  test('says plainly that nothing was found, without passages or without overlap', async () => {
    const none = await model.complete(ask('What is the leave policy?', { context: [] }));
    assert.equal(none.text, NOTHING_FOUND);
    const unrelated = await model.complete(ask('Which GPU does the render farm use?', { context: passages }));
    assert.equal(unrelated.text, NOTHING_FOUND);
    assert.ok(!unrelated.text.includes('Based on'));
  });

  test('respects maxTokens', async () => {
    const long = { text: Array.from({ length: 40 }, (_, i) => `Leave rule number ${i} says that leave must be approved by the manager in writing.`).join(' '), source: 'rules.pdf' };
    for (const maxTokens of [12, 40, 90]) {
      const res = await model.complete(ask('When must leave be approved?', { context: [long], maxTokens }));
      assert.ok(countTokens(res.text) <= maxTokens, `${countTokens(res.text)} <= ${maxTokens}: ${res.text}`);
      assert.ok(res.usage.outputTokens <= maxTokens);
    }
    const roomy = await model.complete(ask('When must leave be approved?', { context: [long], maxTokens: 90 }));
    assert.match(roomy.text, /rules\.pdf/u);
  });

  test('stream yields several deltas, then done with the same result as complete()', async () => {
    const req = ask('How many days of annual leave do I get?', { context: passages });
    const events = await collect(model.stream(req));
    const deltas = events.filter((e) => e.type === 'delta');
    assert.ok(deltas.length >= 3, `deltas: ${deltas.length}`);
    const done = events.at(-1);
    assert.equal(done?.type, 'done');
    assert.equal(events.filter((e) => e.type === 'done').length, 1);
    const expected = await model.complete(req);
    assert.deepEqual(done?.type === 'done' && done.result, expected);
    assert.equal(deltas.map((d) => (d.type === 'delta' ? d.text : '')).join(''), expected.text);
  });

  test('an aborted signal stops the call', async () => {
    const ac = new AbortController();
    ac.abort();
    await assert.rejects(model.complete(ask('leave?', { context: passages, signal: ac.signal })), { name: 'AbortError' });
  });
});

describe('provider factory and sanitize request', () => {
  test('createChatModel picks the provider and demands a base URL for openai-compatible', () => {
    const base: LlmConfig = { provider: 'local', timeoutMs: 1000, maxRetries: 0 };
    const local = createChatModel(base);
    assert.ok(local instanceof LocalChatModel);
    assert.equal(local.provider, 'local');
    assert.equal(local.defaultModel, 'local-extractive-v1');
    assert.throws(() => createChatModel({ ...base, provider: 'openai-compatible', model: 'm' }), /LLM_BASE_URL/u);
    const remote = createChatModel({ ...base, provider: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', model: 'm' });
    assert.ok(remote instanceof OpenAiCompatibleChatModel);
    assert.equal(remote.defaultModel, 'm');
  });

  test('buildSanitizeRequest: system prompt, user text, temperature 0, token budget', () => {
    const text = 'Some   extracted text.\nPage 1 of 2';
    const req = buildSanitizeRequest(text, 'summary-model');
    assert.equal(req.purpose, 'sanitize');
    assert.deepEqual(req.messages, [
      { role: 'system', content: SANITIZE_SYSTEM_PROMPT },
      { role: 'user', content: text },
    ]);
    assert.equal(req.model, 'summary-model');
    assert.equal(req.temperature, 0);
    assert.equal(req.maxTokens, 2 * countTokens(text) + 256);
    assert.match(SANITIZE_SYSTEM_PROMPT, /do not summarise/iu);
    assert.equal(buildSanitizeRequest('word '.repeat(20_000)).maxTokens, 16_000);
    assert.equal(buildSanitizeRequest('x').model, undefined);
  });

  test('sanitizePieces: pieces within both bounds, cut at the strongest break, nothing lost but the whitespace at the cuts', () => {
    const paragraphs = Array.from({ length: 400 }, (_, i) => `Paragraph ${i}. ${'Some words here. '.repeat(12)}`.trim()).join('\n\n');
    const pieces = sanitizePieces(paragraphs);
    assert.ok(pieces.length > 1);
    for (const p of pieces.slice(0, -1)) {
      assert.ok(p.text.length <= 8000 && countTokens(p.text) <= 7000);
      assert.equal(p.joiner, '\n\n');
      assert.match(p.text, /\.$/u, 'a paragraph ends the piece');
    }
    assert.equal(pieces.at(-1)!.joiner, '');
    assert.equal(pieces.map((p) => p.text + p.joiner).join(''), paragraphs);
    // one line of sentences: cut after a sentence end; one long run without spaces: cut at the bound, never inside a pair
    const sentences = 'A sentence that goes on. '.repeat(1000).trim();
    const bySentence = sanitizePieces(sentences);
    assert.ok(bySentence.slice(0, -1).every((p) => p.text.endsWith('.') && p.joiner === ' '));
    assert.equal(bySentence.map((p) => p.text + p.joiner).join(''), sentences);
    const emoji = '😀'.repeat(9000);
    const run = sanitizePieces(`x${emoji}`);
    assert.equal(run.map((p) => p.text + p.joiner).join(''), `x${emoji}`);
    for (const p of run) assert.doesNotMatch(p.text, /\p{Cs}/u, 'no half of a surrogate pair');
    // dense text (several tokens a character) is cut smaller, under the token bound
    for (const p of run) assert.ok(countTokens(p.text) <= 7000, String(countTokens(p.text)));
    assert.deepEqual(sanitizePieces('short text'), [{ text: 'short text', tokens: countTokens('short text'), joiner: '' }]);
    for (const p of pieces) assert.equal(p.tokens, countTokens(p.text));
  });
});

describe('openai-compatible chat model against a local OpenAI stub', () => {
  let stub: OpenAiStub;
  const config = (over: Partial<LlmConfig> = {}): LlmConfig => ({
    provider: 'openai-compatible',
    baseUrl: stub.baseUrl,
    apiKey: 'sk-test-123',
    model: 'stub-model',
    timeoutMs: 2000,
    maxRetries: 2,
    ...over,
  });
  const chatRequests = () => stub.requestsTo('/v1/chat/completions');

  before(async () => {
    stub = await startOpenAiStub();
  });
  after(() => stub.close());

  const fresh = () => {
    stub.requests.length = 0;
    stub.setChatHandler(null);
    stub.delayMs(0);
    stub.streamChunkDelayMs(0);
  };

  test('stoppedBy(): a stop signal ends a call in progress (completion or stream) with its reason, whatever the caller passed', async () => {
    fresh();
    stub.delayMs(1500);
    const stop = new AbortController();
    const model = stoppedBy(new OpenAiCompatibleChatModel(config({ maxRetries: 0 })), stop.signal);
    assert.equal(model.defaultModel, 'stub-model');
    const reason = new Error('the server is shutting down');
    const own = new AbortController(); // the caller's own signal, never aborted: the stop still applies
    const completing = model.complete({ ...buildSanitizeRequest('text', 'm'), signal: own.signal });
    const streaming = (async () => {
      for await (const _event of model.stream(buildSanitizeRequest('text', 'm'))) {
        // nothing arrives before the stop
      }
    })();
    while (chatRequests().length < 2) await new Promise((r) => setTimeout(r, 5));
    stop.abort(reason);
    await assert.rejects(completing, (err) => err === reason);
    await assert.rejects(streaming, (err) => err === reason);
  });

  test('complete(): text, the model the server reports, usage; messages sent as given with the key', async () => {
    fresh();
    stub.setChatHandler(({ lastUserMessage }) => ({ content: `You said: ${lastUserMessage}`, model: 'stub-model-2024-06', usage: { prompt_tokens: 17, completion_tokens: 5 } }));
    const model = new OpenAiCompatibleChatModel(config());
    const req = buildSanitizeRequest('Hello  there', 'institution-model');
    const res = await model.complete(req);
    assert.deepEqual(res, { text: 'You said: Hello  there', model: 'stub-model-2024-06', usage: { inputTokens: 17, outputTokens: 5, totalTokens: 22 } });
    const [sent] = chatRequests();
    assert.equal(chatRequests().length, 1);
    assert.equal(sent!.headers.authorization, 'Bearer sk-test-123');
    assert.equal(sent!.body.model, 'institution-model');
    assert.deepEqual(sent!.body.messages, req.messages);
    assert.equal(sent!.body.temperature, 0);
    assert.equal(sent!.body.max_tokens, req.maxTokens);
    assert.notEqual(sent!.body.stream, true);
  });

  test('without usage from the server, tokens are counted with gpt-tokenizer; no key sends "not-needed"', async () => {
    fresh();
    stub.setChatHandler(() => ({ content: 'Counted locally.', usage: null }));
    const model = new OpenAiCompatibleChatModel(config({ apiKey: undefined }));
    const res = await model.complete(ask('Count me'));
    assert.equal(res.model, 'stub-model');
    assert.equal(res.usage.outputTokens, countTokens('Counted locally.'));
    assert.equal(res.usage.inputTokens, 3 + 2 * 3 + countTokens('Answer from the passages.') + countTokens('Count me'));
    assert.equal(chatRequests()[0]!.headers.authorization, 'Bearer not-needed');
  });

  test('implausible usage from the server (negative, fractional, beyond 100M) is counted locally instead', async () => {
    fresh();
    stub.setChatHandler(() => ({ content: 'Counted locally.', usage: { prompt_tokens: 5_000_000_000, completion_tokens: -3 } }));
    const model = new OpenAiCompatibleChatModel(config());
    const res = await model.complete(ask('Count me'));
    const inputTokens = 3 + 2 * 3 + countTokens('Answer from the passages.') + countTokens('Count me');
    const outputTokens = countTokens('Counted locally.');
    assert.deepEqual(res.usage, { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens });
    stub.setChatHandler(() => ({ content: 'Half a token.', usage: { prompt_tokens: 12, completion_tokens: 2.5 } }));
    assert.deepEqual((await model.complete(ask('x'))).usage, { inputTokens: 12, outputTokens: countTokens('Half a token.'), totalTokens: 12 + countTokens('Half a token.') });
  });

  test('stream(): several deltas, then done with the usage of the final chunk', async () => {
    fresh();
    const model = new OpenAiCompatibleChatModel(config());
    const question = 'one two three four five six seven eight nine ten eleven twelve';
    const events = await collect(model.stream(ask(question)));
    const deltas = events.filter((e) => e.type === 'delta');
    assert.ok(deltas.length >= 3, `deltas: ${deltas.length}`);
    const done = events.at(-1);
    assert.ok(done && done.type === 'done');
    assert.equal(deltas.map((d) => (d.type === 'delta' ? d.text : '')).join(''), question);
    const promptChars = 'Answer from the passages.'.length + 1 + question.length;
    assert.deepEqual(done.result, {
      text: question,
      model: 'stub-model',
      usage: { inputTokens: Math.ceil(promptChars / 4), outputTokens: Math.ceil(question.length / 4), totalTokens: Math.ceil(promptChars / 4) + Math.ceil(question.length / 4) },
    });
    const sent = chatRequests()[0]!.body;
    assert.equal(sent.stream, true);
    assert.deepEqual(sent.stream_options, { include_usage: true });
  });

  test('retries server errors: two 500s, then success (3 requests)', async () => {
    fresh();
    stub.failNext(2, 500);
    const model = new OpenAiCompatibleChatModel(config({ maxRetries: 2 }));
    const res = await model.complete(ask('retry please'));
    assert.equal(res.text, 'retry please');
    assert.equal(chatRequests().length, 3);
  });

  test('streams are retried too before the first byte', async () => {
    fresh();
    stub.failNext(1, 429);
    const model = new OpenAiCompatibleChatModel(config({ maxRetries: 1 }));
    const events = await collect(model.stream(ask('streamed after a 429')));
    assert.equal(events.at(-1)?.type, 'done');
    assert.equal(chatRequests().length, 2);
  });

  test('exhausted retries become an UpstreamError with the status', async () => {
    fresh();
    stub.failNext(3, 503, 'overloaded, try later');
    const model = new OpenAiCompatibleChatModel(config({ maxRetries: 2 }));
    await assert.rejects(model.complete(ask('fail')), (err: unknown) => {
      assert.ok(err instanceof UpstreamError);
      assert.equal(err.status, 503);
      assert.match(err.message, /503.*overloaded, try later/u);
      return true;
    });
    assert.equal(chatRequests().length, 3);
  });

  test('a 400 is not retried', async () => {
    fresh();
    stub.failNext(1, 400, 'bad model');
    const model = new OpenAiCompatibleChatModel(config({ maxRetries: 2 }));
    await assert.rejects(model.complete(ask('bad')), (err: unknown) => err instanceof UpstreamError && err.status === 400);
    assert.equal(chatRequests().length, 1);
  });

  test('a stream that fails after its retries becomes an UpstreamError', async () => {
    fresh();
    stub.failNext(2, 502);
    const model = new OpenAiCompatibleChatModel(config({ maxRetries: 1 }));
    await assert.rejects(collect(model.stream(ask('x'))), (err: unknown) => err instanceof UpstreamError && err.status === 502);
    assert.equal(chatRequests().length, 2);
  });

  test('a server slower than timeoutMs gives an UpstreamError', async () => {
    fresh();
    stub.delayMs(1500);
    const model = new OpenAiCompatibleChatModel(config({ timeoutMs: 150, maxRetries: 0 }));
    const started = Date.now();
    await assert.rejects(model.complete(ask('slow')), (err: unknown) => err instanceof UpstreamError && /did not answer within 150 ms/u.test(err.message));
    assert.ok(Date.now() - started < 1200, 'gave up at the timeout, not when the server answered');
  });

  test('a stalled stream gives an UpstreamError', async () => {
    fresh();
    stub.streamChunkDelayMs(1000);
    const model = new OpenAiCompatibleChatModel(config({ timeoutMs: 200, maxRetries: 0 }));
    await assert.rejects(collect(model.stream(ask('a b c d e f g'))), (err: unknown) => err instanceof UpstreamError && /stalled/u.test(err.message));
  });

  test('a stream whose chunks each come inside the stall timeout but that has not finished LLM_STREAM_MAX_MS after the request is an UpstreamError', async () => {
    fresh();
    // 20 chunks of three words, 150 ms apart: 3 s in all, each gap well inside the stall timeout
    stub.setChatHandler(() => ({ content: Array.from({ length: 60 }, (_, i) => `w${i}`).join(' ') }));
    stub.streamChunkDelayMs(150);
    const started = Date.now();
    const deltas: string[] = [];
    const run = async () => {
      for await (const e of new OpenAiCompatibleChatModel(config({ timeoutMs: 1000, streamMaxMs: 1000, maxRetries: 0 })).stream(ask('long'))) {
        if (e.type === 'delta') deltas.push(e.text);
      }
    };
    await assert.rejects(run(), (err: unknown) => err instanceof UpstreamError && /did not finish within 1000 ms in all \(LLM_STREAM_MAX_MS\)/u.test(err.message));
    const took = Date.now() - started;
    assert.ok(took >= 1000 && took < 2000, `cut off at the deadline, not at the stream's end: ${took} ms`);
    assert.ok(deltas.length > 0 && deltas.length < 20, `part of the answer came first: ${deltas.length} deltas`);
    // the same stream with room for it finishes
    const whole = await collect(new OpenAiCompatibleChatModel(config({ timeoutMs: 1000, streamMaxMs: 10_000, maxRetries: 0 })).stream(ask('long')));
    assert.equal(whole.at(-1)?.type, 'done');
  });

  test('LLM_STREAM_MAX_MS: 1,000 to 3,600,000 ms, 10 minutes by default', () => {
    const base = { NODE_ENV: 'test', DATA_DIR: '/tmp' };
    assert.equal(loadConfig(base).llm.streamMaxMs, DEFAULT_STREAM_MAX_MS);
    assert.equal(DEFAULT_STREAM_MAX_MS, 600_000);
    assert.equal(loadConfig({ ...base, LLM_STREAM_MAX_MS: '90000' }).llm.streamMaxMs, 90_000);
    for (const bad of ['999', '3600001', 'soon']) assert.throws(() => loadConfig({ ...base, LLM_STREAM_MAX_MS: bad }), /LLM_STREAM_MAX_MS must be an integer from 1000 to 3600000/);
  });

  test('a stream that ends cleanly before a finish_reason (no [DONE] either) is an UpstreamError, not a short answer', async () => {
    fresh();
    stub.endNextStreamAfter(2);
    const model = new OpenAiCompatibleChatModel(config({ maxRetries: 0 }));
    const events: ChatStreamEvent[] = [];
    await assert.rejects(
      (async () => {
        for await (const e of model.stream(ask('one two three four five six seven eight nine ten eleven twelve'))) events.push(e);
      })(),
      (err: unknown) => err instanceof UpstreamError && /ended before the answer was finished/u.test(err.message),
    );
    assert.equal(events.filter((e) => e.type === 'delta').length, 2, 'the deltas that came were passed on');
    assert.equal(events.some((e) => e.type === 'done'), false);
    // the same stub, whole: a done event
    assert.equal((await collect(model.stream(ask('whole answer')))).at(-1)?.type, 'done');
  });

  test("a chunk that is not JSON is an UpstreamError, and the SDK does not print it (answer text) to the console", async () => {
    fresh();
    stub.malformNextStreamAfter(1);
    const model = new OpenAiCompatibleChatModel(config({ maxRetries: 0 }));
    const printed: unknown[] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => void printed.push(args);
    try {
      await assert.rejects(collect(model.stream(ask('one two three four five six seven'))), (err: unknown) => err instanceof UpstreamError);
    } finally {
      console.error = original;
    }
    assert.deepEqual(printed, []);
  });

  test('a completion without a choice is an UpstreamError', async () => {
    fresh();
    stub.setChatHandler(() => ({ content: 'ignored', noChoices: true }));
    const model = new OpenAiCompatibleChatModel(config({ maxRetries: 0 }));
    await assert.rejects(model.complete(ask('anything')), (err: unknown) => err instanceof UpstreamError && /without a completion/u.test(err.message));
  });

  test("a completion's body must arrive within timeoutMs of its headers", async () => {
    fresh();
    const model = new OpenAiCompatibleChatModel(config({ timeoutMs: 300, maxRetries: 0 }));
    stub.stallNextBody(100);
    assert.equal((await model.complete(ask('a little late'))).text, 'a little late');
    stub.stallNextBody(5000);
    const started = Date.now();
    await assert.rejects(model.complete(ask('stalled body')), (err: unknown) => err instanceof UpstreamError && /within 300 ms of starting it/u.test(err.message));
    assert.ok(Date.now() - started < 3000, `gave up at the timeout, not when the body came (${Date.now() - started} ms)`);
  });

  test('an unreachable server gives an UpstreamError', async () => {
    const gone = await startOpenAiStub();
    const baseUrl = gone.baseUrl;
    await gone.close();
    const model = new OpenAiCompatibleChatModel(config({ baseUrl, maxRetries: 0 }));
    await assert.rejects(model.complete(ask('anyone?')), (err: unknown) => err instanceof UpstreamError && /Could not connect/u.test(err.message));
  });

  test('request.signal aborts the call with the caller reason, not an UpstreamError', async () => {
    fresh();
    stub.delayMs(1000);
    const model: ChatModel = new OpenAiCompatibleChatModel(config());
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('client went away')), 50);
    await assert.rejects(model.complete(ask('cancel me', { signal: ac.signal })), (err: unknown) => !(err instanceof UpstreamError) && (err as Error).message === 'client went away');
    assert.equal(chatRequests().length, 1, 'no retry after an abort');

    const ac2 = new AbortController();
    setTimeout(() => ac2.abort(new Error('stream cancelled')), 50);
    await assert.rejects(collect(model.stream(ask('cancel the stream', { signal: ac2.signal }))), { message: 'stream cancelled' });
  });
});

describe('the OpenAI stub itself', () => {
  test('embeddings: L2-normalised, deterministic, of the requested dimensions, plain and base64', async () => {
    const stub = await startOpenAiStub({ apiKey: 'k' });
    try {
      const post = (body: unknown, key = 'k') =>
        fetch(`${stub.baseUrl}/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify(body) });
      const res = await post({ model: 'e', input: ['hello world', 'hello world', 'other text'] });
      assert.equal(res.status, 200);
      const json = (await res.json()) as { data: { embedding: number[]; index: number }[]; usage: { prompt_tokens: number } };
      assert.equal(json.data.length, 3);
      for (const d of json.data) {
        assert.equal(d.embedding.length, 8);
        assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-9);
      }
      assert.deepEqual(json.data[0]!.embedding, json.data[1]!.embedding);
      assert.notDeepEqual(json.data[0]!.embedding, json.data[2]!.embedding);
      assert.equal(json.usage.prompt_tokens, 3 + 3 + 3);

      const b64 = (await (await post({ model: 'e', input: 'hello world', dimensions: 16, encoding_format: 'base64' })).json()) as { data: { embedding: string }[] };
      const buf = Buffer.from(b64.data[0]!.embedding, 'base64');
      const vec = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4));
      assert.equal(vec.length, 16);
      assert.ok(Math.abs(Math.hypot(...vec) - 1) < 1e-6);

      assert.equal((await post({ model: 'e', input: 'x' }, 'wrong')).status, 401);
      const models = await fetch(`${stub.baseUrl}/models`, { headers: { authorization: 'Bearer k' } });
      assert.equal(((await models.json()) as { object: string }).object, 'list');
      stub.failNext(1, 429);
      const limited = await post({ model: 'e', input: 'x' });
      assert.equal(limited.status, 429);
      assert.equal(((await limited.json()) as { error: { type: string } }).error.type, 'rate_limit_error');
      assert.equal(stub.requests.length, 5);
    } finally {
      await stub.close();
    }
  });
});
