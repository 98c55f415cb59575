/**
 * The CPU part of ingesting one file — extract the text, chunk it, find each chunk's knowledge-graph
 * entities, and (with the local embedder) embed the chunks — as one pure function of the bytes. It runs
 * in the ingestion sandbox process (sandbox.ts), never on the request loop: a hostile file can then cost
 * at most that process's heap and time budget.
 */
import { LocalEmbedder, type LocalEmbedderVersion } from '../../../providers/embeddings/local.js';
import { extractEntities, uploadGraph, type Mention, type UploadGraph } from '../../search/graph.js';
import { chunkText } from './chunker.js';
import { loadEncoding } from '../../../providers/llm/tokens.js';
import { extractText, type ExtractLimits, type Format } from './extract.js';

export interface PrepareTask {
  bytes: Uint8Array;
  mimetype: string;
  originalname: string;
  limits: ExtractLimits;
  /** Embed here with the local (hashed n-gram) model of these dimensions and version; absent: the caller embeds. */
  localEmbed?: { dimensions: number; version: LocalEmbedderVersion };
}

export interface PreparedChunk {
  index: number;
  text: string;
  heading: string | null;
  tokens: number;
  /** The chunk's knowledge-graph entities (search/graph.ts), found here rather than on the request loop. */
  mentions: Mention[];
}

export interface PreparedDocument {
  format: Format;
  pages: number | null;
  chunks: PreparedChunk[];
  /** The file's knowledge-graph entities and edges, from its chunks' mentions. */
  graph: UploadGraph;
  /** chunks.length × dimensions numbers, row by row, when the task asked for local embeddings. */
  vectors?: Float64Array;
  /** Id of the embedder that made `vectors`. */
  embedderId?: string;
  timings: { extract: number; chunk: number; entities: number; embed?: number };
}

export async function prepareDocument(task: PrepareTask): Promise<PreparedDocument> {
  let t = performance.now();
  const lap = () => {
    const now = performance.now();
    const ms = Math.round(now - t);
    t = now;
    return ms;
  };
  const buffer = Buffer.from(task.bytes.buffer, task.bytes.byteOffset, task.bytes.byteLength);
  const doc = await extractText({ buffer, mimetype: task.mimetype, originalname: task.originalname }, task.limits);
  const extract = lap();
  await loadEncoding();
  const pieces = chunkText(doc.text);
  const chunk = lap();
  const chunks: PreparedChunk[] = pieces.map((c) => ({ index: c.index, text: c.text, heading: c.heading ?? null, tokens: c.tokens, mentions: extractEntities(c.text) }));
  const graph = uploadGraph(chunks.map((c) => c.mentions));
  const entities = lap();
  const result: PreparedDocument = { format: doc.format, pages: doc.pages ?? null, chunks, graph, timings: { extract, chunk, entities } };
  if (task.localEmbed !== undefined && chunks.length > 0) {
    const embedder = new LocalEmbedder(task.localEmbed.dimensions, task.localEmbed.version);
    const dims = embedder.dimensions;
    const vectors = new Float64Array(chunks.length * dims);
    chunks.forEach((c, i) => vectors.set(embedder.embedOne(c.text), i * dims));
    result.vectors = vectors;
    result.embedderId = embedder.id;
    result.timings.embed = lap();
  }
  return result;
}
