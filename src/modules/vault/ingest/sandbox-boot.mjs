// Entry of the ingestion sandbox process (sandbox.ts). The app runs TypeScript through tsx: register
// its loader here (a forked process must not depend on the parent's command line), then load the
// TypeScript entry named on the command line.
import { register } from 'tsx/esm/api';

register();
await import(process.argv[2]);
