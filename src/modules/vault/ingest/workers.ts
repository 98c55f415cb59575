import type { AppContext } from '../../../context.js';
import type { App } from '../../../http/types.js';
import { Worker } from '../../../platform/jobs.js';
import { DEFAULT_EXTRACT_LIMITS, type ExtractLimits } from './formats.js';
import { INGEST_QUEUE, ingestGiveUp, ingestJobHandler, type IngestDeps } from './pipeline.js';
import { checkEmbedder } from './reembed.js';
import { IngestSandbox } from './sandbox.js';

/**
 * Background ingestion of this node: once the app is ready, the embedder check (never mix vectors of
 * two models; see checkEmbedder, which serialises its one schema change across nodes) and then
 * INGEST_WORKERS workers on the ingestion queue, each with its own worker thread for the CPU work
 * (sandbox.ts); they stop before the app closes its database.
 */
export function registerIngestion(app: App, ctx: AppContext): void {
  const { config } = ctx;
  const storage = ctx.providers.storage;
  const limits: ExtractLimits = { ...DEFAULT_EXTRACT_LIMITS, maxInflatedBytes: config.ingest.maxInflatedBytes, maxCompressionRatio: config.ingest.maxCompressionRatio };
  // the embedded engine: a large file's writes ahead of its activation give way to requests
  const background = ctx.database.background;
  const depsWith = (sandbox: IngestSandbox): IngestDeps => ({
    db: ctx.db,
    storage,
    embedder: () => ctx.providers.embedder,
    config,
    prepare: (task, signal) => sandbox.run(task, signal),
    limits,
    clock: ctx.clock,
    log: ctx.log,
    singleConnection: ctx.database.kind === 'pglite',
    holdVectorDrain: () => ctx.vectorDrain.hold(),
    ...(background ? { background } : {}),
    afterActivation: (uploadId) => ctx.indexWarmer.warm(uploadId),
  });
  const workers: Worker[] = [];
  const sandboxes: IngestSandbox[] = [];

  app.addHook('onReady', async () => {
    try {
      // Never mix vectors of two models: a changed embedder makes ingestion refuse until re-embedding.
      const check = await checkEmbedder(ctx);
      if (check.status === 'recorded' || check.status === 'adopted') ctx.log.info({ embedder: check.embedder }, `embedder ${check.status}`);
    } catch (err) {
      ctx.log.error({ err }, 'embedder check failed');
    }
    for (let i = 0; i < config.ingestWorkers && !ctx.shutdown.closing.aborted; i++) {
      const sandbox = new IngestSandbox({ heapMb: config.ingest.workerHeapMb, timeoutMs: config.ingest.timeoutMs });
      sandboxes.push(sandbox);
      const deps = depsWith(sandbox);
      const worker = new Worker({
        db: ctx.db,
        queue: INGEST_QUEUE,
        handler: ingestJobHandler(deps),
        onGiveUp: ingestGiveUp(deps),
        log: ctx.log,
        clock: ctx.clock,
        // a job still running when the shutdown's requests have drained is aborted and released (its attempt given back)
        stopGraceMs: ctx.shutdown.jobGraceMs,
      });
      worker.start();
      workers.push(worker);
    }
  });

  // The workers stop as soon as the shutdown begins (their running job's grace counts from then, alongside
  // the requests' drain), and are waited for in preClose, not onClose: onClose hooks run in reverse order of
  // registration, so app.ts's hook that closes the database (added after the routes) would run first.
  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      await Promise.all(workers.splice(0).map((w) => w.stop()));
      await Promise.all(sandboxes.splice(0).map((s) => s.close()));
    })());
  // (a failure is reported by the preClose hook, which awaits the same promise)
  ctx.shutdown.closing.addEventListener('abort', () => void stop().catch(() => undefined), { once: true });
  app.addHook('preClose', stop);
}
