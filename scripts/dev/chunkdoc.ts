import { sql } from 'drizzle-orm';
import { writeFileSync } from 'node:fs';
import { openDatabase, rowsOf } from '../../src/db/client.js';
const database = await openDatabase({ pgliteDataDir: '/tmp/evalcran/pgdata' });
const m: Array<[string, string]> = [];
for (const c of await rowsOf<any>(database.db, sql`select c.id, u.originalname from chunks c join uploads u on u.id = c.upload_id`)) m.push([c.id, /^doc-(.+)\.txt$/.exec(c.originalname)![1]!]);
writeFileSync('/tmp/chunkdoc.json', JSON.stringify(m));
await database.close();
