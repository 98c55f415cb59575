/**
 * Sentence embeddings from a local ONNX model (air-gapped deployments bring their own model):
 * EMBEDDINGS_PROVIDER=onnx, EMBEDDINGS_MODEL_PATH=<directory>, EMBEDDINGS_DIMENSIONS=<its width>.
 *
 * The directory holds the model (`model.onnx`, or `onnx/model.onnx` as Hugging Face exports lay it out)
 * and a WordPiece vocabulary (`vocab.txt`, or `tokenizer.json` with a WordPiece model): the layout of
 * BERT-family sentence encoders (MiniLM, BGE, E5, GTE exports). `tokenizer_config.json` is read for
 * `do_lower_case` (default true) and `model_max_length` (capped at 512). Nothing is fetched from anywhere.
 *
 * Inputs fed: `input_ids`, `attention_mask` and `token_type_ids`, whichever the model declares (int64).
 * Output: the first output; a [batch, seq, dim] tensor is mean-pooled over the attention mask, a
 * [batch, dim] one (a pooled sentence embedding) is used as is; then L2-normalised. Inference runs in
 * onnxruntime's own native threads (session.run is asynchronous), not on the event loop.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Embedder } from './types.js';

type Ort = typeof import('onnxruntime-node');
type Session = import('onnxruntime-node').InferenceSession;

export interface OnnxEmbedderOptions {
  modelPath: string;
  dimensions: number;
  /** token budget per text ([CLS] and [SEP] included); default from tokenizer_config.json, else 256 */
  maxTokens?: number;
}

export class WordPieceTokenizer {
  private readonly vocab: Map<string, number>;
  readonly cls: number;
  readonly sep: number;
  readonly unk: number;
  readonly pad: number;

  constructor(
    tokens: string[] | Map<string, number>,
    private readonly lowerCase = true,
  ) {
    this.vocab = tokens instanceof Map ? tokens : new Map(tokens.map((t, i) => [t, i]));
    const need = (t: string) => {
      const id = this.vocab.get(t);
      if (id === undefined) throw new Error(`the vocabulary has no ${t} token`);
      return id;
    };
    this.cls = need('[CLS]');
    this.sep = need('[SEP]');
    this.unk = need('[UNK]');
    this.pad = this.vocab.get('[PAD]') ?? 0;
  }

  /** BERT basic tokenisation (clean, lower-case and strip accents, split punctuation), then greedy longest-match WordPiece. */
  encode(text: string, maxTokens: number): number[] {
    let t = text.replace(/[\p{Cc}\p{Cf}]/gu, ' ');
    if (this.lowerCase) t = t.toLowerCase().normalize('NFD').replace(/\p{Mn}/gu, '');
    const words = t.match(/[\p{P}\p{S}]|[\u4e00-\u9fff]|[^\s\p{P}\p{S}\u4e00-\u9fff]+/gu) ?? [];
    const ids = [this.cls];
    const budget = Math.max(2, maxTokens) - 1;
    for (const word of words) {
      if (ids.length >= budget) break;
      if (word.length > 100) {
        ids.push(this.unk);
        continue;
      }
      const pieces: number[] = [];
      let start = 0;
      let bad = false;
      while (start < word.length) {
        let end = word.length;
        let found: number | undefined;
        while (start < end) {
          const piece = (start > 0 ? '##' : '') + word.slice(start, end);
          found = this.vocab.get(piece);
          if (found !== undefined) break;
          end--;
        }
        if (found === undefined) {
          bad = true;
          break;
        }
        pieces.push(found);
        start = end;
      }
      ids.push(...(bad ? [this.unk] : pieces));
    }
    return [...ids.slice(0, budget), this.sep];
  }
}

function readTokenizer(dir: string, vocabFile: string): { tokenizer: WordPieceTokenizer; maxLength?: number } {
  let lower = true;
  let maxLength: number | undefined;
  const configFile = join(dir, 'tokenizer_config.json');
  if (existsSync(configFile)) {
    const cfg = JSON.parse(readFileSync(configFile, 'utf8')) as { do_lower_case?: boolean; model_max_length?: number };
    if (typeof cfg.do_lower_case === 'boolean') lower = cfg.do_lower_case;
    if (typeof cfg.model_max_length === 'number' && cfg.model_max_length > 0) maxLength = Math.min(512, cfg.model_max_length);
  }
  if (basename(vocabFile) === 'vocab.txt') {
    const tokens = readFileSync(vocabFile, 'utf8').split(/\r?\n/);
    if (tokens[tokens.length - 1] === '') tokens.pop();
    return { tokenizer: new WordPieceTokenizer(tokens, lower), maxLength };
  }
  const tj = JSON.parse(readFileSync(vocabFile, 'utf8')) as { model?: { type?: string; vocab?: Record<string, number> } };
  if (tj.model?.type !== 'WordPiece' || !tj.model.vocab) throw new Error(`${vocabFile}: only WordPiece tokenizers are supported`);
  return { tokenizer: new WordPieceTokenizer(new Map(Object.entries(tj.model.vocab)), lower), maxLength };
}

export interface OnnxModelFiles {
  /** the model's directory (EMBEDDINGS_MODEL_PATH itself, or the folder of the .onnx file it names) */
  dir: string;
  /** the .onnx file */
  model: string;
  /** `vocab.txt`, else `tokenizer.json` */
  vocab: string;
}

const isFile = (path: string): boolean => statSync(path, { throwIfNoEntry: false })?.isFile() ?? false;

/**
 * Finds the files the embedder needs under EMBEDDINGS_MODEL_PATH (a directory, or a .onnx file whose folder
 * holds the vocabulary), or throws naming what is missing. The embedder opens what this finds, and the
 * configuration calls it at start (config.ts), so that a path the embedder cannot use fails the start.
 */
export function findOnnxModelFiles(modelPath: string): OnnxModelFiles {
  const stat = statSync(modelPath, { throwIfNoEntry: false });
  if (!stat) throw new Error(`EMBEDDINGS_MODEL_PATH ${modelPath} does not exist`);
  let dir: string;
  let model: string | undefined;
  if (stat.isDirectory()) {
    dir = modelPath;
    model = [join(modelPath, 'model.onnx'), join(modelPath, 'onnx', 'model.onnx')].find(isFile);
    if (!model) throw new Error(`EMBEDDINGS_MODEL_PATH ${modelPath} holds no model.onnx (nor onnx/model.onnx)`);
  } else if (stat.isFile() && modelPath.endsWith('.onnx')) {
    dir = join(modelPath, '..');
    model = modelPath;
  } else {
    throw new Error(`EMBEDDINGS_MODEL_PATH ${modelPath} is neither a directory nor a .onnx file`);
  }
  const vocab = [join(dir, 'vocab.txt'), join(dir, 'tokenizer.json')].find(isFile);
  if (!vocab) throw new Error(`EMBEDDINGS_MODEL_PATH ${dir} has neither vocab.txt nor tokenizer.json`);
  return { dir, model, vocab };
}

export class OnnxEmbedder implements Embedder {
  readonly id: string;
  readonly dimensions: number;
  private readonly file: string;
  private readonly tokenizer: WordPieceTokenizer;
  private readonly maxTokens: number;
  private session?: Promise<{ ort: Ort; session: Session }>;

  constructor(options: OnnxEmbedderOptions) {
    const { dir, model, vocab } = findOnnxModelFiles(options.modelPath);
    this.file = model;
    const { tokenizer, maxLength } = readTokenizer(dir, vocab);
    this.tokenizer = tokenizer;
    this.maxTokens = options.maxTokens ?? maxLength ?? 256;
    this.dimensions = options.dimensions;
    // the id names the model (directory and file size) and the width: another model means a re-embed
    this.id = `onnx:${basename(dir)}:${statSync(this.file).size}:${options.dimensions}`;
  }

  private load() {
    this.session ??= (async () => {
      const ort = await import('onnxruntime-node');
      const session = await ort.InferenceSession.create(this.file, { graphOptimizationLevel: 'all' });
      return { ort, session };
    })();
    return this.session;
  }

  async embed(texts: string[]): Promise<number[][]> {
    if (texts.length === 0) return [];
    const { ort, session } = await this.load();
    const encoded = texts.map((t) => this.tokenizer.encode(t, this.maxTokens));
    const seq = Math.max(...encoded.map((e) => e.length));
    const n = texts.length;
    const ids = new BigInt64Array(n * seq);
    const mask = new BigInt64Array(n * seq);
    encoded.forEach((e, i) => {
      for (let j = 0; j < seq; j++) {
        ids[i * seq + j] = BigInt(j < e.length ? e[j]! : this.tokenizer.pad);
        mask[i * seq + j] = j < e.length ? 1n : 0n;
      }
    });
    const feeds: Record<string, InstanceType<Ort['Tensor']>> = {};
    for (const name of session.inputNames) {
      if (name === 'input_ids') feeds[name] = new ort.Tensor('int64', ids, [n, seq]);
      else if (name === 'attention_mask') feeds[name] = new ort.Tensor('int64', mask, [n, seq]);
      else if (name === 'token_type_ids') feeds[name] = new ort.Tensor('int64', new BigInt64Array(n * seq), [n, seq]);
      else throw new Error(`the ONNX model wants an input "${name}" this embedder does not know`);
    }
    const outputs = await session.run(feeds);
    const out = outputs[session.outputNames[0]!]!;
    const data = out.data as Float32Array;
    const dims = out.dims;
    const width = Number(dims[dims.length - 1]);
    if (width !== this.dimensions) throw new Error(`the ONNX model returns ${width} numbers per text but EMBEDDINGS_DIMENSIONS is ${this.dimensions}`);
    const vectors: number[][] = [];
    for (let i = 0; i < n; i++) {
      const v = new Array<number>(width).fill(0);
      if (dims.length === 3) {
        const len = encoded[i]!.length;
        for (let j = 0; j < len; j++) for (let k = 0; k < width; k++) v[k]! += data[(i * seq + j) * width + k]!;
        for (let k = 0; k < width; k++) v[k]! /= len;
      } else {
        for (let k = 0; k < width; k++) v[k] = data[i * width + k]!;
      }
      const norm = Math.hypot(...v);
      vectors.push(norm > 0 ? v.map((x) => x / norm) : v);
    }
    return vectors;
  }
}
