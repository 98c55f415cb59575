/**
 * A load generator's process for the latency benchmarks that host the app themselves (bench/search.ts): it
 * sends the requests it is given one at a time over one keep-alive connection, and reports each one's time
 * from the first byte sent to the last byte of the answer received, so that the client's own work (building
 * and parsing requests and answers) runs on another thread than the server's, as a real client's would.
 *
 * Reads one job as JSON on stdin: { url, headers, bodies: string[] }; writes { ms: number[], status: number[],
 * tookMs: (number | null)[] } as JSON on stdout (tookMs: the answer's field of that name, when it has one).
 */
import { Agent, request } from 'node:http';

interface Job {
  url: string;
  headers: Record<string, string>;
  bodies: string[];
}

function send(agent: Agent, job: Job, body: string): Promise<{ ms: number; status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = request(job.url, { method: 'POST', agent, headers: { ...job.headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (b: Buffer) => parts.push(b));
      res.on('end', () => resolve({ ms: performance.now() - started, status: res.statusCode ?? 0, text: Buffer.concat(parts).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function main(): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const job = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Job;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const out = { ms: [] as number[], status: [] as number[], tookMs: [] as Array<number | null> };
  for (const body of job.bodies) {
    const r = await send(agent, job, body);
    out.ms.push(r.ms);
    out.status.push(r.status);
    let took: number | null = null;
    try {
      const parsed = JSON.parse(r.text) as { tookMs?: unknown };
      if (typeof parsed.tookMs === 'number') took = parsed.tookMs;
    } catch {
      // not JSON: the status tells
    }
    out.tookMs.push(took);
  }
  agent.destroy();
  process.stdout.write(JSON.stringify(out));
}

await main();
