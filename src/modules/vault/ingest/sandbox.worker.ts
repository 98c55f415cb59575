/**
 * Inside an ingestion worker thread: runs prepareDocument for each task the host sends and answers
 * with the result (the vectors' buffer transferred, not copied) or with the error. An ExtractionError
 * is the file's fault (kind 'file'); anything else is reported as 'internal'.
 */
import { parentPort } from 'node:worker_threads';
import { ExtractionError } from './extract.js';
import { prepareDocument, type PrepareTask } from './prepare.js';

export type SandboxRequest = { id: number; task: PrepareTask };
export type SandboxResponse =
  | { id: number; ok: true; result: Awaited<ReturnType<typeof prepareDocument>> }
  | { id: number; ok: false; kind: 'file' | 'internal'; message: string };

const port = parentPort;
if (!port) throw new Error('sandbox.worker.ts must run in a worker thread');

port.on('message', (msg: SandboxRequest) => {
  void prepareDocument(msg.task).then(
    (result) => {
      const reply: SandboxResponse = { id: msg.id, ok: true, result };
      port.postMessage(reply, result.vectors ? [result.vectors.buffer as ArrayBuffer] : []);
    },
    (err: unknown) => {
      const reply: SandboxResponse = {
        id: msg.id,
        ok: false,
        kind: err instanceof ExtractionError ? 'file' : 'internal',
        message: err instanceof Error ? err.message : String(err),
      };
      port.postMessage(reply);
    },
  );
});
port.postMessage({ ready: true });
