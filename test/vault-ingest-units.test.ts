/**
 * Units of ingestion that need no app and no database: text extraction, chunking, embedders.
 * Every file is built here, for real (pdf-lib for PDF, docx for DOCX); the OpenAI-compatible
 * embedder talks to a small HTTP server on 127.0.0.1.
 */
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PDFDocument, StandardFonts, rgb } from 'pdf-lib';
import { Document, HeadingLevel, Packer, Paragraph, TextRun } from 'docx';
import { DEFAULT_EXTRACT_LIMITS, detectFormat, extractText, ExtractionError, htmlDepth, SUPPORTED_FORMATS } from '../src/modules/vault/ingest/extract.js';
import { IngestSandbox, SandboxFailure } from '../src/modules/vault/ingest/sandbox.js';
import { contentMismatch } from '../src/modules/vault/ingest/sniff.js';
import { checkZipContainer } from '../src/modules/vault/ingest/zip.js';
import { JobAbortedError } from '../src/platform/jobs.js';
import { buildZip, deeplyNestedHtml, deflated, deflatedRepeat, docxBomb, docxWith, DOCUMENT_HEAD, DOCUMENT_TAIL, plainDocx, pngBytes, xmlBombDocx } from './support/hostile.js';
import { chunkText, countTokens, type Chunk } from '../src/modules/vault/ingest/chunker.js';
import { LocalEmbedder } from '../src/providers/embeddings/local.js';
import { OpenAiCompatibleEmbedder } from '../src/providers/embeddings/openai-compatible.js';
import { createEmbedder } from '../src/providers/embeddings/index.js';
import type { EmbeddingsConfig } from '../src/providers/embeddings/types.js';

const file = (content: string | Buffer | Uint8Array, originalname: string, mimetype = 'application/octet-stream') => ({
  buffer: typeof content === 'string' ? Buffer.from(content, 'utf8') : Buffer.from(content),
  originalname,
  mimetype,
});

async function rejectsWith(promise: Promise<unknown>, message: RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof ExtractionError, `expected an ExtractionError, got ${String(err)}`);
    assert.match(err.message, message);
    return true;
  });
}

describe('extractText', () => {
  test('format: extension first, then mimetype; unsupported is null', () => {
    assert.deepEqual([...SUPPORTED_FORMATS], ['txt', 'md', 'csv', 'json', 'html', 'pdf', 'docx']);
    assert.equal(detectFormat('text/plain', 'notes.md'), 'md');
    assert.equal(detectFormat('application/octet-stream', 'REPORT.PDF'), 'pdf');
    assert.equal(detectFormat('application/json; charset=utf-8', 'data'), 'json');
    assert.equal(detectFormat('application/vnd.openxmlformats-officedocument.wordprocessingml.document', 'upload.bin'), 'docx');
    assert.equal(detectFormat('text/html', 'page.htm'), 'html');
    assert.equal(detectFormat('image/png', 'photo.png'), null);
  });

  test('unsupported type names the extension, the mimetype and what is supported', async () => {
    await rejectsWith(
      extractText(file('x', 'photo.xyz', 'image/png')),
      /^Unsupported file type: \.xyz \(image\/png\)\. Supported: txt, md, csv, json, html, pdf, docx$/,
    );
  });

  test('txt: UTF-8 with BOM, latin1 fallback, control characters removed', async () => {
    const bom = await extractText(file(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('Grüße\r\naus Köln\u0000!')]), 'a.txt'));
    assert.deepEqual(bom, { text: 'Grüße\naus Köln!', format: 'txt' });
    const latin1 = await extractText(file(Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x20, 0x6e, 0x6f, 0x69, 0x72]), 'b.txt', 'text/plain'));
    assert.equal(latin1.text, 'café noir');
  });

  test('empty or blank file: "File contains no text"', async () => {
    await rejectsWith(extractText(file('  \n\n\t ', 'empty.txt')), /^File contains no text$/);
    await rejectsWith(extractText(file('', 'empty.md')), /^File contains no text$/);
  });

  test('md: kept as written', async () => {
    const doc = await extractText(file('# Title\n\nSome *text*.\n\n## Part\n\n- item', 'a.md', 'text/markdown'));
    assert.equal(doc.format, 'md');
    assert.equal(doc.text, '# Title\n\nSome *text*.\n\n## Part\n\n- item');
  });

  test('csv: one "header: value" line per row, quoted commas, quotes and newlines parsed', async () => {
    const csv = 'name,city,note\r\n"Smith, John",Berlin,"said ""hi""\nand left"\r\nAda,,first programmer\r\n';
    const doc = await extractText(file(csv, 'people.csv', 'text/csv'));
    assert.equal(doc.format, 'csv');
    const lines = doc.text.split('\n');
    // one line per data row (a leading line naming the columns is allowed)
    assert.deepEqual(lines.slice(-2), ['name: Smith, John; city: Berlin; note: said "hi" and left', 'name: Ada; note: first programmer']);
    assert.ok(lines.length <= 3, doc.text);
  });

  test('csv: semicolon-separated files are recognised', async () => {
    const doc = await extractText(file('a;b\n1;"x;y"\n', 'semi.csv'));
    assert.equal(doc.text.split('\n').pop(), 'a: 1; b: x;y');
  });

  test('json: flattened path: value lines; invalid JSON is an ExtractionError', async () => {
    const json = JSON.stringify({ order: { id: 7, items: [{ name: 'Pen', qty: 2 }, { name: 'Ink' }], paid: true, note: null }, 'odd key': 'v' });
    const doc = await extractText(file(json, 'order.json', 'application/json'));
    assert.deepEqual(doc.text.split('\n'), [
      'order.id: 7',
      'order.items[0].name: Pen',
      'order.items[0].qty: 2',
      'order.items[1].name: Ink',
      'order.paid: true',
      'order.note: null',
      '["odd key"]: v',
    ]);
    await rejectsWith(extractText(file('{"a": 1,,}', 'bad.json')), /^Invalid JSON/);
  });

  test('html: headings as # lines, no script/style/nav, no URLs', async () => {
    const html = `<!doctype html><html><head><title>Ignored title</title><style>p{color:red}</style>
      <script>window.secret = "SCRIPT_TEXT"</script></head><body>
      <nav><a href="/home">Home</a> <a href="/about">About us</a></nav>
      <h1>Annual Review</h1><p>Revenue grew, see <a href="https://example.com/report?id=1">the report</a>.</p>
      <img src="https://cdn.example.com/chart.png" alt="Revenue chart">
      <h2>Outlook</h2><ul><li>Hire more</li><li>Expand</li></ul>
      <table><tr><th>Year</th><th>Sales</th></tr><tr><td>2025</td><td>10</td></tr></table>
      <noscript>NOSCRIPT_TEXT</noscript></body></html>`;
    const doc = await extractText(file(html, 'page.html', 'text/html'));
    const lines = doc.text.split('\n');
    assert.ok(lines.includes('# Annual Review'), doc.text);
    assert.ok(lines.includes('## Outlook'), doc.text);
    assert.match(doc.text, /Revenue grew, see the report\./);
    assert.match(doc.text, /Hire more/);
    assert.match(doc.text, /Year\W+Sales/);
    assert.match(doc.text, /2025\W+10/);
    for (const absent of ['SCRIPT_TEXT', 'color:red', 'About us', 'Home', 'http', 'example.com', 'NOSCRIPT_TEXT', 'Ignored title']) {
      assert.ok(!doc.text.includes(absent), `"${absent}" should not be in: ${doc.text}`);
    }
  });

  test('pdf: text of each page, in order, with the page count', async () => {
    const pdf = await PDFDocument.create();
    const font = await pdf.embedFont(StandardFonts.Helvetica);
    const pageTexts = [
      ['Alpha page talks about apples.', 'Apples are red.'],
      ['Bravo page talks about bananas.', 'Bananas are yellow.'],
      ['Charlie page talks about cherries.', 'Cherries are small.'],
    ];
    for (const lines of pageTexts) {
      const page = pdf.addPage([595, 842]);
      lines.forEach((line, i) => page.drawText(line, { x: 50, y: 780 - i * 20, size: 12, font }));
    }
    const doc = await extractText(file(await pdf.save(), 'fruit.pdf', 'application/pdf'));
    assert.equal(doc.format, 'pdf');
    assert.equal(doc.pages, 3);
    const pages = doc.text.split('\n\n');
    assert.equal(pages.length, 3, doc.text);
    pageTexts.forEach((lines, i) => {
      for (const line of lines) assert.ok(pages[i]!.includes(line), `page ${i + 1} should contain "${line}": ${pages[i]}`);
    });
  });

  test('pdf without text (a scan) and corrupt pdf are ExtractionErrors', async () => {
    const pdf = await PDFDocument.create();
    pdf.addPage([300, 300]).drawRectangle({ x: 10, y: 10, width: 100, height: 100, color: rgb(0.2, 0.2, 0.2) });
    await rejectsWith(extractText(file(await pdf.save(), 'scan.pdf')), /^PDF has no extractable text \(scanned image\?\)$/);

    let seed = 7;
    const random = Buffer.alloc(4096);
    for (let i = 0; i < random.length; i++) random[i] = (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24;
    await rejectsWith(extractText(file(Buffer.concat([Buffer.from('%PDF-1.7\n'), random]), 'broken.pdf')), /^Could not read PDF: .+/);
  });

  test('docx: headings as # lines, paragraphs kept', async () => {
    const document = new Document({
      sections: [
        {
          children: [
            new Paragraph({ text: 'Quarterly Report', heading: HeadingLevel.HEADING_1 }),
            new Paragraph({ children: [new TextRun('Sales rose by '), new TextRun({ text: 'twelve percent', bold: true }), new TextRun('.')] }),
            new Paragraph({ text: 'Risks', heading: HeadingLevel.HEADING_2 }),
            new Paragraph('Supply chains remain fragile.'),
          ],
        },
      ],
    });
    const doc = await extractText(file(await Packer.toBuffer(document), 'report.docx'));
    assert.equal(doc.format, 'docx');
    assert.equal(doc.text, '# Quarterly Report\n\nSales rose by twelve percent.\n\n## Risks\n\nSupply chains remain fragile.');
  });

  test('corrupt docx is an ExtractionError', async () => {
    await rejectsWith(extractText(file('PK\u0003\u0004 definitely not a zip', 'broken.docx')), /^Could not read DOCX: .+/);
  });
});

// ---------------------------------------------------------------------------------------------

const sentence = (i: number) => `Sentence ${i} tells a small story about item ${i} and why it matters.`;

function sectionsOf(chunks: Chunk[]) {
  return chunks.map((c) => c.heading);
}

describe('chunkText', () => {
  test('countTokens: o200k tokens, special-token text counted as text', () => {
    assert.equal(countTokens(''), 0);
    assert.equal(countTokens('hello world'), 2);
    assert.ok(countTokens('a <|endoftext|> b') > 3);
  });

  test('long input: chunks within maxTokens, exact token counts, consecutive indices, no sentence lost', () => {
    const paragraphs = Array.from({ length: 40 }, (_, p) => Array.from({ length: 6 }, (_, s) => sentence(p * 6 + s)).join(' '));
    const text = paragraphs.join('\n\n');
    const chunks = chunkText(text, { maxTokens: 120, overlapTokens: 30 });
    assert.ok(chunks.length > 10);
    chunks.forEach((c, i) => {
      assert.equal(c.index, i);
      assert.equal(c.tokens, countTokens(c.text));
      assert.ok(c.tokens <= 120, `chunk ${i} has ${c.tokens} tokens`);
      assert.equal(c.heading, undefined);
    });
    const all = chunks.map((c) => c.text).join('\n');
    for (let i = 0; i < 240; i++) assert.ok(all.includes(sentence(i)), `lost: ${sentence(i)}`);
    // chunks hold sentences in order: the first sentence of each chunk comes no earlier than the previous chunk's first
    const firstIds = chunks.map((c) => Number(/Sentence (\d+)/.exec(c.text)![1]));
    for (let i = 1; i < firstIds.length; i++) assert.ok(firstIds[i]! > firstIds[i - 1]!);
  });

  test('defaults: 400 tokens max, overlap between consecutive chunks', () => {
    const text = Array.from({ length: 300 }, (_, i) => sentence(i)).join(' ');
    const chunks = chunkText(text);
    assert.ok(chunks.length >= 3);
    for (const c of chunks) assert.ok(c.tokens <= 400 && c.tokens > 200, `${c.tokens}`);
    for (let i = 1; i < chunks.length; i++) {
      const previous = chunks[i - 1]!.text;
      const first = /^Sentence \d+ [^.]*\./.exec(chunks[i]!.text)?.[0];
      assert.ok(first, `chunk ${i} starts with a whole sentence`);
      assert.ok(previous.endsWith(first) || previous.includes(`${first} `), `chunk ${i} starts with a sentence of chunk ${i - 1}`);
      // the repeated part is about overlapTokens (60), never more
      const repeated = chunks[i]!.text.slice(0, chunks[i]!.text.indexOf(previous.slice(previous.lastIndexOf('Sentence'))) + 1);
      assert.ok(countTokens(repeated) <= 60 + 20);
    }
  });

  test('overlap 0: no repeated sentence', () => {
    const text = Array.from({ length: 100 }, (_, i) => sentence(i)).join(' ');
    const chunks = chunkText(text, { maxTokens: 100, overlapTokens: 0 });
    const seen = chunks.flatMap((c) => c.text.match(/Sentence \d+ /g) ?? []);
    assert.equal(seen.length, 100);
  });

  test('headings start sections and are recorded; sections do not share a chunk', () => {
    const text = [
      '# Guide',
      '## Install',
      Array.from({ length: 30 }, (_, i) => sentence(i)).join(' '),
      '## Usage',
      'Run the tool. It prints a report.',
      'Usage Notes',
      'A stand-alone title-case line above counts as a heading.',
      'Setext Heading',
      '==============',
      'Text under a setext heading.',
    ].join('\n\n');
    const chunks = chunkText(text, { maxTokens: 100, overlapTokens: 20 });
    const headings = sectionsOf(chunks);
    assert.equal(chunks[0]!.heading, 'Install');
    assert.ok(chunks[0]!.text.startsWith('# Guide\n\n## Install\n\nSentence 0'), chunks[0]!.text);
    const install = chunks.filter((c) => c.heading === 'Install');
    assert.ok(install.length >= 3);
    for (const c of install) assert.ok(!c.text.includes('Run the tool'));
    const usage = chunks.find((c) => c.heading === 'Usage')!;
    assert.equal(usage.text, '## Usage\n\nRun the tool. It prints a report.');
    assert.equal(chunks.find((c) => c.heading === 'Usage Notes')!.text, 'Usage Notes\n\nA stand-alone title-case line above counts as a heading.');
    assert.ok(chunks.find((c) => c.heading === 'Setext Heading')!.text.endsWith('Text under a setext heading.'));
    assert.deepEqual([...new Set(headings)], ['Install', 'Usage', 'Usage Notes', 'Setext Heading']);
  });

  test('numbered and capitalised heading lines inside PDF-like text start sections', () => {
    const text = 'Intro text of the paper ends here.\n2.1 Method Overview\nWe measured everything twice.\nRESULTS\nAll good.';
    const chunks = chunkText(text, { maxTokens: 50 });
    assert.deepEqual(
      chunks.map((c) => [c.heading, c.text]),
      [
        [undefined, 'Intro text of the paper ends here.'],
        ['2.1 Method Overview', '2.1 Method Overview\n\nWe measured everything twice.'],
        ['RESULTS', 'RESULTS\n\nAll good.'],
      ],
    );
  });

  test('a heading inside a code fence is not a heading', () => {
    const chunks = chunkText('Intro.\n\n```\n# not a heading\nprint(1)\n```\n\nAfter.', { maxTokens: 100 });
    assert.equal(chunks.length, 1);
    assert.equal(chunks[0]!.heading, undefined);
  });

  test('an over-long sentence is cut into windows; every word survives in order', () => {
    const words = Array.from({ length: 2000 }, (_, i) => `w${i}`);
    const chunks = chunkText(words.join(' '), { maxTokens: 64, overlapTokens: 0 });
    for (const c of chunks) assert.ok(c.tokens <= 64);
    assert.deepEqual(chunks.map((c) => c.text).join(' ').split(' '), words);
  });

  test('an unbroken 20 000-character string (base64) is cut by characters, within the limit', () => {
    let blob = '';
    for (let i = 0; blob.length < 20_000; i++) blob += Buffer.from(`chunk-${i}-${i * 7919}`).toString('base64').replace(/=/g, '');
    const chunks = chunkText(blob, { maxTokens: 100, overlapTokens: 0 });
    for (const c of chunks) assert.ok(c.tokens <= 100 && c.tokens === countTokens(c.text));
    assert.equal(chunks.map((c) => c.text).join(''), blob);
  });

  test('CSV-like lines stay whole rows', () => {
    const rows = Array.from({ length: 50 }, (_, i) => `id: ${i}; name: Person ${i}; city: Town ${i}`);
    const chunks = chunkText(['Columns: id, name, city', ...rows].join('\n'), { maxTokens: 80, overlapTokens: 0 });
    const lines = chunks.flatMap((c) => c.text.split('\n'));
    for (const row of rows) assert.ok(lines.includes(row), row);
  });

  test('empty and blank text give no chunks', () => {
    assert.deepEqual(chunkText(''), []);
    assert.deepEqual(chunkText(' \n\n \t'), []);
  });

  test('1 MB of prose is chunked in well under 5 seconds', () => {
    const text = Array.from({ length: 16_000 }, (_, i) => sentence(i) + (i % 5 === 4 ? '\n\n' : ' ')).join('');
    assert.ok(text.length > 1_000_000);
    const started = performance.now();
    const chunks = chunkText(text);
    const ms = performance.now() - started;
    assert.ok(ms < 5000, `${ms} ms`);
    assert.ok(chunks.every((c) => c.tokens <= 400));
  });
});

// ---------------------------------------------------------------------------------------------

const cosine = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i]!, 0);
const norm = (a: number[]) => Math.sqrt(a.reduce((s, x) => s + x * x, 0));

describe('LocalEmbedder', () => {
  const embedder = new LocalEmbedder();

  test('id, dimensions, unit norm, deterministic across instances', async () => {
    assert.equal(embedder.id, 'local:hashed-ngrams-v2:384');
    assert.equal(embedder.dimensions, 384);
    const texts = ['The cat sat on the mat.', 'Quarterly revenue grew by twelve percent.'];
    const [a, b] = await embedder.embed(texts);
    assert.equal(a!.length, 384);
    assert.ok(Math.abs(norm(a!) - 1) < 1e-9 && Math.abs(norm(b!) - 1) < 1e-9);
    assert.deepEqual(await new LocalEmbedder(384).embed(texts), [a, b]);
    assert.notDeepEqual(a, b);
    assert.equal(new LocalEmbedder(64).id, 'local:hashed-ngrams-v2:64');
    assert.equal(new LocalEmbedder(64, 1).id, 'local:hashed-ngrams-v1:64');
    assert.throws(() => new LocalEmbedder(64, 3 as never), /unknown version/);
    assert.equal((await new LocalEmbedder(64).embed(['x y z']))[0]!.length, 64);
  });

  test('similar texts are closer than unrelated texts; case and punctuation do not matter', async () => {
    const [query, similar, unrelated, shouting] = await embedder.embed([
      'How do I reset my account password?',
      'To reset the password of your account, open settings.',
      'The pasta recipe needs tomatoes, garlic and basil.',
      'HOW DO I RESET MY ACCOUNT PASSWORD',
    ]);
    assert.ok(cosine(query!, similar!) > cosine(query!, unrelated!) + 0.2, `${cosine(query!, similar!)} vs ${cosine(query!, unrelated!)}`);
    assert.ok(cosine(query!, shouting!) > 0.999);
    // shared stems count through character trigrams
    const [payments, payment, weather] = await embedder.embed(['payments', 'payment', 'weather']);
    assert.ok(cosine(payments!, payment!) > cosine(payments!, weather!));
  });

  test('version 1 still gives the vectors it gave (data directories embedded with it keep matching)', () => {
    // sha256 of the components to 9 decimals, computed with the code before version 2 existed
    const v = new LocalEmbedder(384, 1).embedOne('Quarterly revenue grew by twelve percent in the third quarter of 2025.');
    assert.equal(createHash('sha256').update(v.map((x) => x.toFixed(9)).join(',')).digest('hex').slice(0, 16), 'de8720b8c6dd8b78');
  });

  test('version 2 leaves out stop words, unless the text has no other word', () => {
    const v2 = new LocalEmbedder(384);
    const v1 = new LocalEmbedder(384, 1);
    // leading and trailing stop words change nothing; between two words they part their pair
    assert.deepEqual(v2.embedOne('The boundary layer, and what of it?'), v2.embedOne('boundary layer'));
    assert.notDeepEqual(v1.embedOne('The boundary layer, and what of it?'), v1.embedOne('boundary layer'));
    assert.notDeepEqual(v2.embedOne('boundary layer of the plate'), v2.embedOne('boundary layer plate'));
    assert.deepEqual(v2.embedOne('boundary layer of the plate'), v2.embedOne('boundary layer with a plate'));
    // only stop words: they are the text, as in version 1
    assert.deepEqual(v2.embedOne('To be or not to be'), v1.embedOne('to be or not to be'));
    assert.ok(v2.embedOne('to be or not to be').some((x) => x !== 0));
    // a query shares more of its length with the right passage than with a passage of the same stop words
    const query = v2.embedOne('what is the heat transfer of a flat plate');
    const right = v2.embedOne('heat transfer measured on flat plates in supersonic flow');
    const wrong = v2.embedOne('what is the use of it and what is there to be done');
    assert.ok(cosine(query, right) > 0.3 && cosine(query, wrong) < 0.05, `${cosine(query, right)} vs ${cosine(query, wrong)}`);
    assert.ok(cosine(v1.embedOne('what is the heat transfer of a flat plate'), v1.embedOne('what is the use of it and what is there to be done')) > 0.2);
  });

  test('empty text and text without words give the zero vector', async () => {
    const [empty, punctuation] = await embedder.embed(['', ' ?!… ']);
    assert.deepEqual(empty, new Array(384).fill(0));
    assert.deepEqual(punctuation, new Array(384).fill(0));
  });

  test('an aborted signal stops the call', async () => {
    const controller = new AbortController();
    controller.abort(new Error('stop'));
    await assert.rejects(embedder.embed(['a'], { signal: controller.signal }), /stop/);
  });
});

// ---------------------------------------------------------------------------------------------

interface SeenRequest {
  url: string;
  authorization: string | undefined;
  body: { model: string; input: string[]; dimensions: number; encoding_format: string };
}

/** A deterministic raw (unnormalised) vector for a text. */
function rawVector(text: string, dims: number): number[] {
  let h = 0;
  for (const ch of text) h = (h * 31 + ch.codePointAt(0)!) >>> 0;
  return Array.from({ length: dims }, (_, i) => ((h >>> (i % 24)) & 7) + 1 + i);
}

describe('OpenAiCompatibleEmbedder', () => {
  let server: Server;
  let baseUrl: string;
  const seen: SeenRequest[] = [];
  let answerDims: number | undefined; // when set, the server answers vectors of this length
  let failWith: number | undefined;

  const readBody = async (req: IncomingMessage) => {
    const parts: Buffer[] = [];
    for await (const part of req) parts.push(part as Buffer);
    return JSON.parse(Buffer.concat(parts).toString('utf8'));
  };

  before(async () => {
    server = createServer(async (req, res) => {
      const body = await readBody(req);
      seen.push({ url: req.url ?? '', authorization: req.headers.authorization, body });
      if (req.method !== 'POST' || req.url !== '/v1/embeddings') {
        res.writeHead(404).end();
        return;
      }
      if (failWith) {
        res.writeHead(failWith, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'model not loaded', type: 'invalid_request_error' } }));
        return;
      }
      const dims = answerDims ?? body.dimensions;
      // answered in reverse order: the client must sort by index
      const data = body.input.map((text: string, index: number) => ({ object: 'embedding', index, embedding: rawVector(text, dims) })).reverse();
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({ object: 'list', data, model: body.model, usage: { prompt_tokens: 5, total_tokens: 5 } }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const config = (over: Partial<EmbeddingsConfig> = {}): EmbeddingsConfig => ({
    provider: 'openai-compatible',
    baseUrl,
    model: 'test-embed',
    dimensions: 8,
    batchSize: 2,
    timeoutMs: 5000,
    maxRetries: 0,
    ...over,
  });

  test('batches of batchSize, vectors in input order, L2-normalised', async () => {
    seen.length = 0;
    answerDims = undefined;
    failWith = undefined;
    const embedder = new OpenAiCompatibleEmbedder(config());
    assert.equal(embedder.id, 'openai-compatible:test-embed:8');
    const texts = ['alpha', 'beta', 'gamma', 'delta', 'epsilon'];
    const vectors = await embedder.embed(texts);
    assert.equal(seen.length, 3);
    assert.deepEqual(seen.map((r) => r.body.input), [['alpha', 'beta'], ['gamma', 'delta'], ['epsilon']]);
    for (const r of seen) {
      assert.equal(r.url, '/v1/embeddings');
      assert.equal(r.body.model, 'test-embed');
      assert.equal(r.body.dimensions, 8);
      assert.equal(r.body.encoding_format, 'float');
      assert.equal(r.authorization, 'Bearer not-needed');
    }
    texts.forEach((text, i) => {
      const raw = rawVector(text, 8);
      const length = norm(raw);
      assert.equal(vectors[i]!.length, 8);
      vectors[i]!.forEach((x, k) => assert.ok(Math.abs(x - raw[k]! / length) < 1e-12));
      assert.ok(Math.abs(norm(vectors[i]!) - 1) < 1e-12);
    });
  });

  test('the API key is sent; blank texts are not sent and get the zero vector', async () => {
    seen.length = 0;
    const embedder = new OpenAiCompatibleEmbedder(config({ apiKey: 'sk-test', batchSize: 10 }));
    const vectors = await embedder.embed(['one', '  ', 'two']);
    assert.equal(seen.length, 1);
    assert.deepEqual(seen[0]!.body.input, ['one', 'two']);
    assert.equal(seen[0]!.authorization, 'Bearer sk-test');
    assert.deepEqual(vectors[1], new Array(8).fill(0));
    assert.ok(Math.abs(norm(vectors[2]!) - 1) < 1e-12);
    assert.deepEqual(await embedder.embed([]), []);
    assert.equal(seen.length, 1);
  });

  test('vectors of the wrong length are an Error naming both lengths', async () => {
    answerDims = 5;
    try {
      await assert.rejects(new OpenAiCompatibleEmbedder(config()).embed(['x']), (err: unknown) => {
        assert.ok(err instanceof Error);
        assert.match(err.message, /length 5, expected 8/);
        return true;
      });
    } finally {
      answerDims = undefined;
    }
  });

  test('an HTTP error from the server is a clear Error', async () => {
    failWith = 400;
    try {
      await assert.rejects(new OpenAiCompatibleEmbedder(config()).embed(['x']), /HTTP 400: model not loaded/);
    } finally {
      failWith = undefined;
    }
  });

  test('createEmbedder: local by default settings, openai-compatible needs base URL and model', async () => {
    const local = createEmbedder({ ...config(), provider: 'local', dimensions: 384, baseUrl: undefined, model: undefined });
    assert.ok(local instanceof LocalEmbedder);
    assert.equal(local.id, 'local:hashed-ngrams-v2:384');
    assert.ok(createEmbedder(config()) instanceof OpenAiCompatibleEmbedder);
    assert.throws(() => createEmbedder(config({ baseUrl: undefined })), /EMBEDDINGS_BASE_URL/);
    assert.throws(() => createEmbedder(config({ model: undefined })), /EMBEDDINGS_MODEL/);
  });
});

describe('ingestion bounds: zip containers, content sniffing, the sandbox process', () => {
  const limits = { maxInflatedBytes: 10 * 1024 * 1024, maxCompressionRatio: 100, maxEntries: 50 };

  test('zip: a real DOCX passes; bombs are refused from the central directory, or while inflating when the sizes lie', async () => {
    assert.deepEqual(checkZipContainer(plainDocx('hello'), limits).entries, 3);
    assert.throws(() => checkZipContainer(Buffer.from('PK\u0003\u0004 not a zip at all'), limits), /not a valid zip container/);
    const bomb = await docxBomb(20 * 1024 * 1024);
    assert.throws(() => checkZipContainer(bomb, limits), /^ZipLimitError: The document would inflate to more than 10 MB \(declared sizes\)/);
    // declared 1,000 bytes: caught by the inflation cap (ratio first, then the total when the ratio is allowed)
    const lying = await docxBomb(20 * 1024 * 1024, { declaredSize: 1000 });
    assert.throws(() => checkZipContainer(lying, limits), /inflates more than 100 times its compressed size/);
    assert.throws(() => checkZipContainer(lying, { ...limits, maxCompressionRatio: 1_000_000 }), /^ZipLimitError: The document inflates to more than 10 MB; it was not opened$/);
    // a declared size that is larger than the truth is a crafted or corrupt file too
    const entry = deflated('word/document.xml', DOCUMENT_HEAD + 'x' + DOCUMENT_TAIL);
    assert.throws(() => checkZipContainer(docxWith({ ...entry, declaredSize: entry.uncompressedSize + 10 }), limits), /declares \d+ bytes but holds \d+/);
    assert.throws(() => checkZipContainer(xmlBombDocx(), limits), /declares a DTD or entities/);
    // too many entries
    const many = buildZip(Array.from({ length: 51 }, (_, i) => deflated(`f${i}.xml`, '<a/>')));
    assert.throws(() => checkZipContainer(many, limits), /has 51 entries; at most 50/);
    // encrypted entries are refused by their flag
    const encrypted = buildZip([deflated('a.xml', '<a/>')]);
    encrypted.writeUInt16LE(1, encrypted.indexOf(Buffer.from([0x50, 0x4b, 0x01, 0x02])) + 8);
    assert.throws(() => checkZipContainer(encrypted, limits), /Encrypted/);
  });

  test('zip: what is checked is what JSZip reads: the whole central directory, one entry per name, no gap, the same local names', async () => {
    const parts = (document: string) => [
      deflated('[Content_Types].xml', '<Types/>'),
      deflated('_rels/.rels', '<Relationships/>'),
      deflated('word/document.xml', DOCUMENT_HEAD + document + DOCUMENT_TAIL),
    ];
    const eocdOf = (zip: Buffer) => zip.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
    const withCount = (zip: Buffer, count: number) => {
      const out = Buffer.from(zip);
      out.writeUInt16LE(count, eocdOf(out) + 8);
      out.writeUInt16LE(count, eocdOf(out) + 10);
      return out;
    };
    // the end record counts 3 entries; JSZip reads the 4th header too
    const uncounted = withCount(buildZip([...parts('checked'), deflated('customXml/item1.xml', '<never-checked/>')]), 3);
    assert.throws(() => checkZipContainer(uncounted, limits), /^ZipLimitError: The zip end record counts 3 entries but its central directory holds 4: a corrupt or crafted file$/, 'an entry past the count');
    // the reviewer's file: a 4th, uncounted word/document.xml (JSZip's replaces the checked one)
    const shadow = withCount(buildZip([...parts('checked'), deflated('word/document.xml', DOCUMENT_HEAD + 'never checked' + DOCUMENT_TAIL)]), 3);
    assert.throws(() => checkZipContainer(shadow, limits), /^ZipLimitError: The container holds "word\/document\.xml" twice: a corrupt or crafted file$/, 'a shadow document past the count');
    // hidden past the count, a bomb is refused by the declared-size bound (the reviewer's 150 MB file)
    const hiddenBomb = withCount(buildZip([...parts('checked'), await deflatedRepeat('word/document.xml', DOCUMENT_HEAD, 'A', 20 * 1024 * 1024, DOCUMENT_TAIL)]), 3);
    assert.throws(() => checkZipContainer(hiddenBomb, limits), /^ZipLimitError: The document would inflate to more than 10 MB \(declared sizes\)/, 'a bomb past the count');
    // two entries of one name, also when spelled differently ("word/./document.xml" is resolved by JSZip)
    const twice = buildZip([...parts('first'), deflated('word/document.xml', DOCUMENT_HEAD + 'second' + DOCUMENT_TAIL)]);
    assert.throws(() => checkZipContainer(twice, limits), /^ZipLimitError: The container holds "word\/document\.xml" twice/, 'the same name twice');
    const spelled = buildZip([...parts('first'), deflated('word/./document.xml', DOCUMENT_HEAD + 'second' + DOCUMENT_TAIL)]);
    assert.throws(() => checkZipContainer(spelled, limits), /^ZipLimitError: The container holds "word\/document\.xml" twice/, 'the same name spelled twice');
    // the DTD check applies to the name JSZip (and mammoth) use: "word/document.xml/." is word/document.xml
    const withDtd = `<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY a "aaaa">]>${DOCUMENT_HEAD.replace('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>', '')}&a;${DOCUMENT_TAIL}`;
    const dtd = buildZip([deflated('[Content_Types].xml', '<Types/>'), deflated('word/document.xml/.', withDtd)]);
    assert.throws(() => checkZipContainer(dtd, limits), /"word\/document\.xml" declares a DTD or entities/, 'a DTD under a name JSZip resolves');
    // bytes between the central directory and the end record: JSZip would shift every offset by them
    const plain = buildZip(parts('fine'));
    const at = eocdOf(plain);
    const gap = Buffer.concat([plain.subarray(0, at), Buffer.alloc(16, 0x20), plain.subarray(at)]);
    assert.throws(() => checkZipContainer(gap, limits), /^ZipLimitError: The zip central directory ends 16 bytes before its end record/, 'a gap before the end record');
    // a local header that names the entry otherwise (JSZip takes the local name)
    const renamed = Buffer.from(plain);
    const local = renamed.indexOf(Buffer.from('word/document.xml'));
    renamed.write('word/documenX.xml', local);
    assert.throws(() => checkZipContainer(renamed, limits), /^ZipLimitError: The zip entry "word\/document\.xml" has another name in its local header/, 'a local name that differs');
    // the two counts of the end record disagree
    const counts = Buffer.from(plain);
    counts.writeUInt16LE(2, eocdOf(counts) + 8);
    assert.throws(() => checkZipContainer(counts, limits), /counts 3 entries in all but 2 on its disk/, 'the two counts differ');
    // and an ordinary container still passes
    assert.deepEqual(checkZipContainer(plain, limits).entries, 3, 'a plain container passes');
  });

  test('sniffing: the bytes must agree with the format the name gives', () => {
    assert.equal(contentMismatch('txt', pngBytes()), 'The file is named as txt text but its content is a PNG image');
    assert.equal(contentMismatch('csv', Buffer.from([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1])), 'The file is named as csv text but its content is an ELF executable');
    assert.equal(contentMismatch('md', Buffer.from(Array.from({ length: 400 }, (_, i) => (i * 37) & 0xff))), 'The file is named as md text but its content is binary data');
    assert.equal(contentMismatch('pdf', Buffer.from('just text')), 'The file is named as a PDF but its content is not a PDF');
    assert.equal(contentMismatch('docx', Buffer.from('%PDF-1.7')), 'The file is named as a DOCX but its content is a PDF document');
    assert.equal(contentMismatch('txt', Buffer.from('plain text with a stray \u0000 NUL')), null);
    assert.equal(contentMismatch('txt', Buffer.from('\ufeffh\u0000i\u0000', 'utf16le')), null);
    assert.equal(contentMismatch('json', Buffer.from('{"a":1}')), null);
    assert.equal(contentMismatch('html', Buffer.from('GIF is a format; <b>GIF89 is not at the start</b>')), null);
    assert.equal(contentMismatch('docx', plainDocx('x')), null);
  });

  test('HTML nesting is measured in linear time and refused beyond the limit', async () => {
    // ul > li (an <li> closes the open <li>, a <p> the open <p>); br and img are leaves under the <p>
    assert.equal(htmlDepth('<ul><li>a<li>b</ul><p>x<p>y<br><img src=x/>', 100), 2, 'ul > li, and p > br');
    assert.equal(htmlDepth('<a'.repeat(200_000), 100), 0, 'a tag name that never ends opens nothing');
    await rejectsWith(extractText(file(deeplyNestedHtml(5000), 'deep.html')), /^The HTML is nested more than 1024 elements deep; it was not read$/);
    const ok = await extractText(file(deeplyNestedHtml(500), 'fine.html'));
    assert.match(ok.text, /buried text/);
  });

  test('HTML nesting is counted as htmlparser2 builds the tree: "<div/>" and quoted "<" or ">" in attributes open elements; raw text and comments do not', async () => {
    const cases: Array<[string, number, string]> = [
      ['<div/>'.repeat(50), 50, 'in HTML the slash of a non-void element is ignored: each <div/> opens a div'],
      ['<div title="<">'.repeat(50), 50, 'a "<" inside a quoted attribute value is no tag'],
      ["<div title='>'>".repeat(50), 50, 'nor a ">" inside a quoted value the end of the tag'],
      ['<p><span>'.repeat(50), 100, 'a <p> closes an open <p> only when it is the current element'],
      ['<li><p>'.repeat(50), 100, 'nor does an <li> close an <li> that is not the current element'],
      [`<svg>${'<path d="M0 0"/>'.repeat(50)}<g/></svg>`, 2, 'inside SVG "<x/>" does close'],
      [`<br/><hr/><img/><input/>${'<wbr/>'.repeat(50)}`, 1, 'void elements never nest'],
      [`<script>${'<div>'.repeat(50)}</script>x`, 1, 'the text of a script is not markup'],
      [`<style>${'<div>'.repeat(50)}</style >x`, 1, 'nor that of a style'],
      [`<textarea>${'<div>'.repeat(50)}</textarea>x`, 1, 'nor that of a textarea'],
      [`<title>${'<div>'.repeat(50)}</title>x`, 1, 'nor that of a title'],
      [`<script/>${'<div>'.repeat(50)}`, 51, 'a "self-closed" script is no raw text: what follows is markup, inside it'],
      [`<!-- ${'<div>'.repeat(50)} --><![CDATA[${'<div>'.repeat(50)}]]><?pi <div>?><!DOCTYPE html>x`, 0, 'comments, CDATA, processing instructions and declarations are no elements'],
      [`${'<div>'.repeat(50)}${'</div>'.repeat(50)}${'<div>'.repeat(50)}`, 50, 'closed elements give their depth back'],
      [`${'<b>'.repeat(50)}${'</i>'.repeat(1000)}<b>`, 51, 'an end tag of no open element closes nothing'],
    ];
    for (const [html, depth, why] of cases) assert.equal(htmlDepth(html, 10_000), depth, `${why}: ${html.slice(0, 60)}`);
    // the reviewer's files: 200,000 nested elements (~1.2 and ~3 MB) are refused by the bound at once,
    // instead of running htmlparser2's quadratic parse until the time limit
    for (const unit of ['<div/>', '<div title="<">']) {
      const html = `<html><body><p>Intro text.</p>${unit.repeat(200_000)}buried</body></html>`;
      const started = performance.now();
      await rejectsWith(extractText(file(html, 'deep.html', 'text/html')), /^The HTML is nested more than 1024 elements deep; it was not read$/);
      const ms = performance.now() - started;
      assert.equal(ms < 3000, true, `${unit}: refused in ${Math.round(ms)} ms`);
    }
  });

  test('sandbox: a task over its time limit is stopped with a readable error; an abort is not a failure; the next task gets a fresh process', async () => {
    const sandbox = new IngestSandbox({ heapMb: 256, timeoutMs: 20 });
    try {
      const json = Buffer.from(`[${'{"key":"value"},'.repeat(300_000)}1]`);
      await assert.rejects(
        sandbox.run({ bytes: json, mimetype: '', originalname: 'slow.json', limits: DEFAULT_EXTRACT_LIMITS }),
        (err: unknown) =>
          err instanceof SandboxFailure &&
          err.reason === 'timeout' &&
          err.message === 'Text extraction took longer than 0.02 s (INGEST_TIMEOUT_SECONDS) and was stopped; the file was not indexed',
      );
      assert.equal(sandbox.pid, undefined, 'the process was killed');
      const slow = new IngestSandbox({ heapMb: 256, timeoutMs: 60_000 });
      const ac = new AbortController();
      const running = slow.run({ bytes: json, mimetype: '', originalname: 'slow.json', limits: DEFAULT_EXTRACT_LIMITS }, ac.signal);
      setTimeout(() => ac.abort(), 50);
      await assert.rejects(running, (err: unknown) => err instanceof JobAbortedError);
      const doc = await slow.run({ bytes: Buffer.from('A small text file.'), mimetype: '', originalname: 'a.txt', limits: DEFAULT_EXTRACT_LIMITS, localEmbed: { dimensions: 8, version: 1 } });
      assert.equal(doc.chunks.length, 1);
      assert.equal(doc.vectors?.length, 8);
      // the version asked for, not the default one
      assert.equal(doc.embedderId, 'local:hashed-ngrams-v1:8');
      assert.deepEqual(Array.from(doc.vectors!), new LocalEmbedder(8, 1).embedOne('A small text file.'));
      assert.equal(slow.started, 2);
      await slow.close();
    } finally {
      await sandbox.close();
    }
  });
});
