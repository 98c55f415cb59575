import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../src/config.js';
import { ContentFilter } from '../src/modules/conversation/content-filter.js';
import { trim } from '../src/modules/conversation/histories.service.js';
import { chargeUnits, costUnits, exactCost, maxCostUnits, priceFor, unitsToDecimal } from '../src/modules/conversation/pricing.js';
import { classicPrompt, localDateTime, PROMPT_GENERATORS, PROMPT_MODES, soulPrompt, soulV2Prompt, type PromptContext } from '../src/modules/conversation/prompts.js';
import { runTool, selectTools } from '../src/modules/conversation/tools.js';
import { maxTokensFieldFor } from '../src/providers/llm/openai-compatible.js';

const context = (over: Partial<PromptContext> = {}): PromptContext => ({
  assistant: { name: 'Lab helper', instructions: 'Always give units.', arguments: ['first arg', '', '', '', 'fifth arg'] },
  institution: { name: 'Acme Physics', ainame: 'Newton', about: 'Answers physics questions.' },
  user: { name: 'Ada Lovelace', isoDate: '2026-11-23T09:15:00Z', timezone: 'Asia/Tokyo', location: 'Kyoto' },
  memory: [{ key: 'level', value: 'undergraduate', description: 'study level' }],
  history: [{ input: 'What is a newton?', output: 'A unit of force.' }],
  passages: [{ text: 'F = m a relates force and acceleration.', source: 'laws.md, part 1' }],
  question: 'How big is the force?',
  ragOnly: false,
  ragIgnore: false,
  tools: [],
  ...over,
});

describe('prompt generators (pure functions of one context)', () => {
  for (const mode of PROMPT_MODES) {
    test(`${mode}: uses every part of the context, deterministic`, () => {
      const ctx = context();
      const a = PROMPT_GENERATORS[mode](ctx);
      const b = PROMPT_GENERATORS[mode](structuredClone(ctx));
      assert.deepEqual(a, b);
      const system = a.messages[0]!;
      assert.equal(system.role, 'system');
      for (const part of ['Newton', 'Acme Physics', 'Answers physics questions.', 'Always give units.', 'first arg', 'fifth arg', 'Kyoto', 'Asia/Tokyo', '18:15', 'level: undergraduate', '[1] (laws.md, part 1)', 'F = m a']) {
        assert.ok(system.content.includes(part), `${mode} lacks ${part}:\n${system.content}`);
      }
      assert.deepEqual(
        a.messages.slice(1).map((m) => [m.role, m.content]),
        [
          ['user', 'What is a newton?'],
          ['assistant', 'A unit of force.'],
          ['user', 'How big is the force?'],
        ],
      );
      assert.deepEqual(a.context, [{ text: 'F = m a relates force and acceleration.', source: 'laws.md, part 1' }]);
      assert.equal(ctx.history.length, 1, 'the context is not mutated');
    });

    test(`${mode}: ragOnly without passages tells the model to say the documents do not cover it`, () => {
      const system = PROMPT_GENERATORS[mode](context({ ragOnly: true, passages: [] })).messages[0]!.content;
      assert.match(system, /no passage matched this question: say plainly that the documents do not cover it/);
      const withPassages = PROMPT_GENERATORS[mode](context({ ragOnly: true })).messages[0]!.content;
      assert.match(withPassages, /Answer ONLY from the numbered passages/);
    });
  }

  test('the three generators frame the prompt differently', () => {
    const ctx = context();
    const systems = [classicPrompt(ctx), soulPrompt(ctx), soulV2Prompt(ctx)].map((p) => p.messages[0]!.content);
    assert.equal(new Set(systems).size, 3);
    assert.match(systems[0]!, /^You are Newton, an AI assistant of Acme Physics/);
    assert.match(systems[1]!, /Speak in the first person as Newton/);
    assert.match(systems[2]!, /<method>[\s\S]*Cite passages as \[n\]/);
    assert.match(systems[2]!, /This is turn 2 of the conversation/);
  });

  test('without institution, assistant, memory or passages nothing is invented', () => {
    const p = classicPrompt(context({ institution: null, assistant: null, memory: [], passages: [], history: [], tools: ['vault_search'], user: { name: '', isoDate: '2026-11-23T09:15:00Z', timezone: 'UTC', location: '' } }));
    const system = p.messages[0]!.content;
    assert.match(system, /^You are the assistant, an AI assistant\./);
    assert.doesNotMatch(system, /location|memory|Passages/);
    assert.match(system, /No passage of the user's documents matched/);
    assert.match(system, /You may call these tools when they help: vault_search/);
    assert.equal(p.messages.length, 2);
  });

  test('ragIgnore: no "no passage matched" line', () => {
    assert.doesNotMatch(classicPrompt(context({ ragIgnore: true, passages: [] })).messages[0]!.content, /No passage/);
  });

  test('localDateTime formats in the user time zone', () => {
    assert.equal(localDateTime('2026-11-23T23:30:00Z', 'Europe/Berlin'), 'Tuesday, 24 November 2026 at 00:30 (Europe/Berlin)');
  });
});

describe('pricing', () => {
  test('credits per 1,000 tokens, rounded up to 0.0001, with the discount', () => {
    assert.equal(costUnits(1000, 1000, { input: 1, output: 2 }), 30_000);
    assert.equal(costUnits(1, 0, { input: 1, output: 2 }), 10, '1 token at 1/1k = 0.001 credit');
    assert.equal(costUnits(1, 0, { input: 0.001, output: 0 }), 1, '0.000001 credit rounds up to 0.0001');
    assert.equal(costUnits(0, 0, { input: 5, output: 5 }), 0);
    assert.equal(costUnits(1000, 0, { input: 3, output: 0, discount: 25 }), 22_500);
    assert.equal(costUnits(333, 777, { input: 0.15, output: 0.6 }), Math.ceil((333 * 0.15 + 777 * 0.6) * 10));
    assert.ok(maxCostUnits(100, 500, { input: 1, output: 2 }) >= costUnits(110, 500, { input: 1, output: 2 }));
    // the calls of one answer are added exactly and the charge rounded once: three calls of 0.000001 credit
    // each are one unit (0.0001), not three
    const tiny = { input: 0.001, output: 0 };
    assert.equal(chargeUnits(exactCost(1, 0, tiny) + exactCost(1, 0, tiny) + exactCost(1, 0, tiny)), 1);
    const half = { input: 0.15, output: 0 }; // one token: 0.00015 credit = 1.5 units
    assert.equal(costUnits(1, 0, half), 2);
    assert.equal(chargeUnits(exactCost(1, 0, half) + exactCost(1, 0, half)), 3, '2 × 1.5 units = 3 units, not 2 × 2');
  });

  test('a model absent from MODEL_PRICES costs the "*" entry', () => {
    const prices = { '*': { input: 7, output: 8 }, 'gpt-x': { input: 1, output: 1 } };
    assert.deepEqual(priceFor('gpt-x', prices), { input: 1, output: 1 });
    assert.deepEqual(priceFor('other', prices), { input: 7, output: 8 });
    assert.deepEqual(priceFor('other', {}), { input: 1, output: 2 });
  });

  test('units become exact decimal text', () => {
    assert.equal(unitsToDecimal(12_345), '1.2345');
    assert.equal(unitsToDecimal(-5), '-0.0005');
    assert.equal(unitsToDecimal(0), '0.0000');
  });

  test('MODEL_PRICES and the content filter settings are validated at start', () => {
    const base = { NODE_ENV: 'test', DATA_DIR: '/tmp/twin-units', JWT_SECRET: 'x'.repeat(32), ENCRYPTION_KEY: 'y'.repeat(32) };
    const config = loadConfig({ ...base, MODEL_PRICES: '{"gpt-4o": {"input": 2.5, "output": 10, "discount": 10}}', CONTENT_FILTER_TERMS: '["bad"]' });
    assert.deepEqual(config.modelPrices, { '*': { input: 1, output: 2 }, 'gpt-4o': { input: 2.5, output: 10, discount: 10 } });
    assert.deepEqual(config.contentFilter.terms, ['bad']);
    assert.throws(() => loadConfig({ ...base, MODEL_PRICES: '{"m": {"input": -1, "output": 1}}' }), (e: unknown) => e instanceof ConfigError && /MODEL_PRICES/.test(e.message));
    assert.throws(() => loadConfig({ ...base, MODEL_PRICES: 'not json' }), ConfigError);
    assert.throws(() => loadConfig({ ...base, CONTENT_FILTER_PATTERNS: '["(unclosed"]' }), (e: unknown) => e instanceof ConfigError && /CONTENT_FILTER_PATTERNS/.test(e.message));
  });
});

describe('content filter (local rules)', () => {
  const filter = new ContentFilter({ terms: ['drop table', 'bomb'], patterns: ['\\b\\d{3}-\\d{2}-\\d{4}\\b'], patternTimeoutMs: 1000, moderationModel: 'm', moderationTimeoutMs: 1000 });
  after(() => filter.close());
  test('terms match whole words, case-insensitively; patterns as given', async () => {
    assert.equal((await filter.localVerdict(['How to build a BOMB?'])).blocked, true);
    assert.equal((await filter.localVerdict(['please DROP TABLE users'])).blocked, true);
    assert.equal((await filter.localVerdict(['a bombastic speech'])).blocked, false);
    assert.deepEqual(await filter.localVerdict(['my ssn is 123-45-6789']), { blocked: true, reason: 'blocked pattern' });
    assert.equal((await filter.localVerdict(['nothing here', 'fine'])).blocked, false);
    assert.equal((await filter.localVerdict(['fine', 'then a bomb'])).reason, 'blocked term');
  });
  test("an operator's pattern that backtracks without bound runs off the request thread, is stopped at the bound and blocks (fails closed); the next request gets a new worker", async () => {
    const bounded = new ContentFilter({ terms: [], patterns: ['^(a+)+$', '\\b\\d{3}-\\d{2}-\\d{4}\\b'], patternTimeoutMs: 200, moderationModel: 'm', moderationTimeoutMs: 1000 });
    try {
      const troubles: Error[] = [];
      // 2^40 ways to split the a's: hours of backtracking on this thread
      const pending = bounded.localVerdict(['a'.repeat(40) + 'b'], (err) => troubles.push(err));
      let ticked = false;
      setImmediate(() => (ticked = true));
      assert.deepEqual(await pending, { blocked: true, reason: 'the content filter could not finish' });
      assert.equal(ticked, true, 'the request thread ran other work while the pattern was tested');
      assert.equal(troubles.length, 1);
      assert.match(troubles[0]!.message, /CONTENT_FILTER_PATTERNS took more than 200 ms/);
      // the worker stuck in the pattern was ended; the next tests run in a new one
      assert.deepEqual(await bounded.localVerdict(['my ssn is 123-45-6789']), { blocked: true, reason: 'blocked pattern' });
      assert.deepEqual(await bounded.localVerdict(['aaaa']), { blocked: true, reason: 'blocked pattern' });
      assert.deepEqual(await bounded.localVerdict(['fine']), { blocked: false });
      // several requests at once: each answered, in order, by the one worker
      const verdicts = await Promise.all(['x', 'aaa', '123-45-6789 here', 'y'].map((text) => bounded.localVerdict([text])));
      assert.deepEqual(verdicts.map((v) => v.blocked), [false, true, true, false]);
    } finally {
      await bounded.close();
    }
    // closed: nothing is tested any more, and the verdict fails closed
    assert.deepEqual(await bounded.localVerdict(['fine']), { blocked: true, reason: 'the content filter could not finish' });
  });
  test('no moderation URL: only the local rules, no network', async () => {
    assert.deepEqual(await filter.check(['hello'], () => assert.fail('no moderation call expected')), { blocked: false });
  });
});

describe('tools', () => {
  test('selection: all, selected with overrides, none; toolsDisabled removes', () => {
    assert.deepEqual(selectTools({ mode: 'all', tools: [], disabled: [] }).map((t) => t.name), ['vault_search', 'memory_lookup', 'current_datetime']);
    const selected = selectTools({ mode: 'selected', tools: [{ tool: 'current_datetime', instructionsOverride: 'Ask the clock' }], disabled: [] });
    assert.deepEqual(selected.map((t) => [t.name, t.description]), [['current_datetime', 'Ask the clock']]);
    assert.deepEqual(selectTools({ mode: 'none', tools: [{ tool: 'vault_search', instructionsOverride: '' }], disabled: [] }), []);
    assert.deepEqual(selectTools({ mode: 'all', tools: [], disabled: ['vault_search', 'memory_lookup'] }).map((t) => t.name), ['current_datetime']);
  });

  const runtime = {
    offered: ['vault_search', 'memory_lookup', 'current_datetime'],
    search: async (q: string, limit: number) => [{ text: `about ${q}`, source: `doc (${limit})` }],
    memory: async () => [{ key: 'goal', value: 'pass the exam' }, { key: 'city', value: 'Kyoto' }],
    now: () => new Date('2026-11-23T09:15:00Z'),
    timezone: 'Europe/Berlin',
  };
  test('runs each tool; bad arguments give an error text, never an exception', async () => {
    assert.equal(await runTool('vault_search', '{"query":"gravity","limit":3}', runtime), '[1] (doc (3)) about gravity');
    assert.equal(await runTool('memory_lookup', '{"term":"kyo"}', runtime), 'city: Kyoto');
    assert.equal(await runTool('current_datetime', '{}', runtime), 'Monday, 23 November 2026 at 10:15 (Europe/Berlin); ISO 2026-11-23T09:15:00.000Z');
    assert.match(await runTool('current_datetime', '{"timezone":"Nowhere/City"}', runtime), /Europe\/Berlin/);
    assert.equal(await runTool('vault_search', '{not json', runtime), 'Error: the arguments are not valid JSON');
    assert.equal(await runTool('vault_search', '[]', runtime), 'Error: the arguments must be a JSON object');
    assert.equal(await runTool('vault_search', '{}', runtime), 'Error: query is required');
    assert.equal(await runTool('rm_rf', '{}', runtime), 'Error: unknown tool rm_rf');
  });
  test('a tool that was not offered is not run: the model is told it is not available', async () => {
    const ran: string[] = [];
    const watched = {
      ...runtime,
      offered: ['current_datetime'],
      search: async (q: string, limit: number) => (ran.push('search'), runtime.search(q, limit)),
      memory: async () => (ran.push('memory'), runtime.memory()),
    };
    assert.equal(await runTool('vault_search', '{"query":"payroll"}', watched), 'Error: tool vault_search is not available');
    assert.equal(await runTool('memory_lookup', '{}', watched), 'Error: tool memory_lookup is not available');
    assert.deepEqual(ran, [], 'neither the vault nor the memory was read');
    assert.match(await runTool('current_datetime', '{}', watched), /Europe\/Berlin/);
  });
});

describe('max_completion_tokens', () => {
  test('picked by model name in auto mode, or as configured', () => {
    assert.equal(maxTokensFieldFor('gpt-4o-mini'), 'max_tokens');
    assert.equal(maxTokensFieldFor('o3-mini'), 'max_completion_tokens');
    assert.equal(maxTokensFieldFor('gpt-5'), 'max_completion_tokens');
    assert.equal(maxTokensFieldFor('llama-3.1-8b', 'max_completion_tokens'), 'max_completion_tokens');
    assert.equal(maxTokensFieldFor('o3', 'max_tokens'), 'max_tokens');
  });
});

test('history strings are trimmed to 200 characters, not 200 UTF-16 units: no character is cut in half', () => {
  const emoji = '😀'.repeat(250);
  assert.equal([...trim(emoji, 200)].length, 200);
  assert.equal(trim(emoji, 200), '😀'.repeat(200));
  const mixed = `a${emoji}`;
  const cut = trim(mixed, 200);
  assert.equal(cut, `a${'😀'.repeat(199)}`);
  assert.doesNotMatch(cut, /\p{Cs}/u, 'no lone surrogate');
  assert.match(`${'😀'.slice(0, 1)}`, /\p{Cs}/u, 'what a cut in half would leave');
  assert.equal(trim('short', 200), 'short');
  assert.equal(trim('x'.repeat(300), 200), 'x'.repeat(200));
});

test('regexSize: atoms count 1, counted repetitions copy their atom, nested ones multiply', async () => {
  const { regexSize } = await import('../src/modules/conversation/regex-size.js');
  assert.equal(regexSize('abc'), 3);
  assert.equal(regexSize('a{5}'), 5);
  assert.equal(regexSize('a{2,}'), 3);
  assert.equal(regexSize('.{0,255}'), 255);
  assert.equal(regexSize('(ab){3}c'), 7);
  assert.equal(regexSize('(.{0,255}){0,255}'), 65_025);
  assert.equal(regexSize('[a-z{}()]{10}'), 10, 'a bracket expression is one atom, whatever it holds');
  assert.equal(regexSize('[[:alpha:]]{4}'), 4);
  assert.equal(regexSize('\\{5}'), 3, 'an escaped brace is an atom, not a repetition');
  assert.equal(regexSize('a*b+c?'), 3);
  assert.equal(regexSize('(?:x{10}){10}'), 100);
});
