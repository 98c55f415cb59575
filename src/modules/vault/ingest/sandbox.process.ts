/**
 * Inside the ingestion sandbox process: runs prepareDocument for each task the parent sends over IPC
 * and answers with the result or the error. An ExtractionError is the file's fault (kind 'file');
 * anything else is reported as 'internal'. The process ends with its parent (IPC disconnect).
 */
import { ExtractionError } from './extract.js';
import { prepareDocument, type PreparedDocument, type PrepareTask } from './prepare.js';

export type SandboxRequest = { id: number; task: PrepareTask };
/** A slice of the result's chunks (and their vectors), sent before the final answer. */
export type SandboxPart = { id: number; part: { chunks: PreparedDocument['chunks']; vectors?: Float64Array } };
export type SandboxResponse =
  | { id: number; ok: true; result: PreparedDocument; parts: number }
  | { id: number; ok: false; kind: 'file' | 'internal'; message: string };

/**
 * Chunks per IPC message. The parent deserializes each message on its request loop in one go: a whole
 * 10 MB document (6,400 chunks and their vectors, ~30 MB) was one stall of about 100 ms there
 * (bench: p99 of /healthz during the extracting stage); a part of this size is a few milliseconds.
 * 64, not 256, since each chunk also carries its knowledge-graph mentions (~46 small objects).
 */
const PART_CHUNKS = 64;

const send = process.send?.bind(process);
if (!send) throw new Error('sandbox.process.ts must run in a forked process');
/** Sends one message and waits until it is handed to the pipe (the parent reads as fast as it can). */
const sendNow = (message: SandboxPart | SandboxResponse) =>
  new Promise<void>((resolve, reject) => send(message, undefined, undefined, (err) => (err ? reject(err) : resolve())));

async function answer(id: number, result: PreparedDocument): Promise<void> {
  const { chunks, vectors } = result;
  const width = vectors && chunks.length > 0 ? vectors.length / chunks.length : 0;
  let parts = 0;
  for (let from = 0; from < chunks.length; from += PART_CHUNKS) {
    const to = Math.min(chunks.length, from + PART_CHUNKS);
    // slice, not subarray: a view would carry its whole buffer across
    await sendNow({ id, part: { chunks: chunks.slice(from, to), ...(vectors ? { vectors: vectors.slice(from * width, to * width) } : {}) } });
    parts++;
  }
  await sendNow({ id, ok: true, result: { ...result, chunks: [], vectors: vectors ? new Float64Array(0) : undefined }, parts });
}

process.on('disconnect', () => process.exit(0));
process.on('message', (msg: SandboxRequest) => {
  void prepareDocument(msg.task)
    .then((result) => answer(msg.id, result))
    .catch((err: unknown) =>
      send({
        id: msg.id,
        ok: false,
        kind: err instanceof ExtractionError ? 'file' : 'internal',
        message: err instanceof Error ? err.message : String(err),
      } satisfies SandboxResponse),
    );
});
send({ ready: true });
