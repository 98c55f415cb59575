import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { createEmbedder, OnnxEmbedder } from '../src/providers/embeddings/index.js';
import { WordPieceTokenizer } from '../src/providers/embeddings/onnx.js';
import { bearer, login, makeWorld, startTestApp } from './support/app.js';
import { tinyEmbeddingModel } from './support/onnx-model.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

/** The `onnx` embedder on a model this test writes itself (no download, no hub). */

const VOCAB = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', 'wind', 'turbine', '##s', 'solar', 'panel', 'energy', ',', 'ocean'];
// 4 dimensions; [CLS]/[SEP] contribute a constant, each word a direction
const TABLE = [
  [0, 0, 0, 0],
  [0, 0, 0, 0.5],
  [0.1, 0.1, 0.1, 0.1],
  [0.1, 0.1, 0.1, 0.1],
  [1, 0, 0, 0],
  [0.8, 0.2, 0, 0],
  [0, 0, 0.3, 0],
  [0, 1, 0, 0],
  [0, 0.8, 0.2, 0],
  [0.5, 0.5, 0, 0],
  [0, 0, 0, 0.2],
  [0, 0, 1, 0],
];
let dir: string;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'onnx-model-'));
  writeFileSync(join(dir, 'model.onnx'), tinyEmbeddingModel(TABLE));
  writeFileSync(join(dir, 'vocab.txt'), `${VOCAB.join('\n')}\n`);
});
after(() => rmSync(dir, { recursive: true, force: true }));

const meanOf = (tokens: string[]) => {
  const rows = tokens.map((t) => TABLE[VOCAB.indexOf(t)]!);
  const v = [0, 1, 2, 3].map((k) => rows.reduce((s, r) => s + r[k]!, 0) / rows.length);
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
};

test('WordPiece: lower case, accents stripped, punctuation split, longest match with ## pieces, unknown words as [UNK]', () => {
  const tok = new WordPieceTokenizer(VOCAB);
  const ids = tok.encode('Wind TURBINES, Océan xyz', 64).map((i) => VOCAB[i]);
  assert.deepEqual(ids, ['[CLS]', 'wind', 'turbine', '##s', ',', 'ocean', '[UNK]', '[SEP]']);
  assert.equal(tok.encode('wind wind wind wind', 4).length, 4, 'the budget includes [CLS] and [SEP]');
});

test('embeds by mean pooling over the attention mask, L2-normalised, batch padding not counted', async () => {
  const embedder = createEmbedder({ provider: 'onnx', modelPath: dir, dimensions: 4, batchSize: 8, timeoutMs: 1000, maxRetries: 0 });
  assert.ok(embedder instanceof OnnxEmbedder);
  assert.match(embedder.id, /^onnx:onnx-model-.+:\d+:4$/);
  const [a, b, c] = await embedder.embed(['wind turbines', 'solar panel energy ocean', 'wind']);
  const close = (x: number[], y: number[]) => x.forEach((v, i) => assert.ok(Math.abs(v - y[i]!) < 1e-5, `${x} vs ${y}`));
  close(a!, meanOf(['[CLS]', 'wind', 'turbine', '##s', '[SEP]']));
  close(b!, meanOf(['[CLS]', 'solar', 'panel', 'energy', 'ocean', '[SEP]']));
  close(c!, meanOf(['[CLS]', 'wind', '[SEP]'])); // padded to the batch's longest text, padding ignored
  for (const v of [a!, b!, c!]) assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-6);
});

test('a width other than EMBEDDINGS_DIMENSIONS and a directory without a model are clear errors', async () => {
  const wrong = createEmbedder({ provider: 'onnx', modelPath: dir, dimensions: 8, batchSize: 8, timeoutMs: 1000, maxRetries: 0 });
  await assert.rejects(wrong.embed(['wind']), /returns 4 numbers per text but EMBEDDINGS_DIMENSIONS is 8/);
  const empty = mkdtempSync(join(tmpdir(), 'onnx-empty-'));
  try {
    assert.throws(() => createEmbedder({ provider: 'onnx', modelPath: empty, dimensions: 4, batchSize: 8, timeoutMs: 1000, maxRetries: 0 }), /no model\.onnx/);
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
});

test('the app ingests and searches with EMBEDDINGS_PROVIDER=onnx (the vector column is sized for the model)', async () => {
  // EMBEDDINGS_DIMENSIONS is at least 8: the same model, 4 more (zero) dimensions
  const wide = mkdtempSync(join(tmpdir(), 'onnx-wide-'));
  writeFileSync(join(wide, 'model.onnx'), tinyEmbeddingModel(TABLE.map((r) => [...r, 0, 0, 0, 0])));
  writeFileSync(join(wide, 'vocab.txt'), `${VOCAB.join('\n')}\n`);
  const t = await startTestApp({ env: { EMBEDDINGS_PROVIDER: 'onnx', EMBEDDINGS_MODEL_PATH: wide, EMBEDDINGS_DIMENSIONS: '8' } });
  try {
    const w = await makeWorld(t.database);
    const token = (await login(t.app, w.userA1.email)).accessToken;
    const up = await uploadOk(t.app, token, { name: 'wind.txt', content: 'Wind turbines and solar panels.', type: 'text/plain' }, { scope: 'personal' });
    assert.equal((await waitForIngestion(t.app, token, up._id)).status, 'active');
    const res = await t.app.inject({ method: 'POST', url: '/api/user/files/search-content', headers: bearer(token), payload: { query: 'ocean energy' } });
    assert.equal(res.statusCode, 200, res.body);
    const hit = res.json().results[0];
    assert.equal(hit.uploadId, up._id);
    assert.ok(hit.denseScore > 0.3, String(hit.denseScore));
  } finally {
    await t.close();
    rmSync(wide, { recursive: true, force: true });
  }
});
