import type { Redis } from 'ioredis';

/** How often each Redis connection is pinged. */
export const REDIS_HEARTBEAT_MS = 10_000;

/**
 * Pings each ready connection every `everyMs`. One whose previous ping is still unanswered at the next
 * tick is taken for dead (a half-open link, which TCP alone reports only after hours): `onDead` is told,
 * and the connection is dropped and reconnects (ioredis resubscribes and resends what it had queued, as
 * after any reconnect). Returns the stop function.
 */
export function startRedisHeartbeat(connections: readonly Redis[], everyMs: number, onDead: (err: Error) => void): () => void {
  const unanswered = new Set<Redis>();
  const timer = setInterval(() => {
    for (const conn of connections) {
      if (conn.status !== 'ready') {
        unanswered.delete(conn);
        continue;
      }
      if (unanswered.has(conn)) {
        unanswered.delete(conn);
        onDead(new Error(`Redis did not answer a heartbeat ping within ${everyMs} ms; reconnecting`));
        conn.disconnect(true);
        continue;
      }
      unanswered.add(conn);
      const answered = () => void unanswered.delete(conn);
      conn.ping().then(answered, answered);
    }
  }, everyMs).unref();
  return () => clearInterval(timer);
}

/** QUIT (Redis finishes what it was sent), but a link that no longer answers gets `withinMs`; then the sockets are dropped. */
export async function quitRedis(connections: readonly Redis[], withinMs = 1000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.allSettled(connections.map((c) => c.quit())), new Promise((resolve) => (timer = setTimeout(resolve, withinMs)))]);
  clearTimeout(timer);
  for (const c of connections) c.disconnect();
}
