/**
 * Inside the ingestion sandbox process: runs prepareDocument for each task the parent sends over IPC
 * and answers with the result or the error. An ExtractionError is the file's fault (kind 'file');
 * anything else is reported as 'internal'. The process ends with its parent (IPC disconnect).
 */
import { ExtractionError } from './extract.js';
import { prepareDocument, type PrepareTask } from './prepare.js';

export type SandboxRequest = { id: number; task: PrepareTask };
export type SandboxResponse =
  | { id: number; ok: true; result: Awaited<ReturnType<typeof prepareDocument>> }
  | { id: number; ok: false; kind: 'file' | 'internal'; message: string };

const send = process.send?.bind(process);
if (!send) throw new Error('sandbox.process.ts must run in a forked process');

process.on('disconnect', () => process.exit(0));
process.on('message', (msg: SandboxRequest) => {
  void prepareDocument(msg.task).then(
    (result) => send({ id: msg.id, ok: true, result } satisfies SandboxResponse),
    (err: unknown) =>
      send({
        id: msg.id,
        ok: false,
        kind: err instanceof ExtractionError ? 'file' : 'internal',
        message: err instanceof Error ? err.message : String(err),
      } satisfies SandboxResponse),
  );
});
send({ ready: true });
