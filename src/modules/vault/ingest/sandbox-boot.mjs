// Entry of the ingestion worker threads. The app runs TypeScript through tsx, whose loader hooks a
// worker thread does not inherit on Node 20: register them here, then load the TypeScript entry.
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(workerData.entry);
