// Run by `npm test` before the test files: builds the migrated database snapshot they all restore.
import { ensureTemplate } from './template.js';

const started = Date.now();
const path = await ensureTemplate();
console.log(`test database template ready: ${path} (${Date.now() - started} ms)`);
