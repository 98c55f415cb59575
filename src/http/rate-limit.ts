import type { FastifyRequest, preHandlerAsyncHookHandler } from 'fastify';
import { rateLimited } from '../shared/errors.js';
import type { App } from './types.js';

export interface LimitSpec {
  max: number;
  timeWindowMs: number;
  key: (request: FastifyRequest) => string;
}

/**
 * A preHandler that applies several limits to one route (e.g. per IP and per e-mail). The plugin's own
 * `rateLimit()` handler runs only once per request, so each limit uses `createRateLimit` and the
 * first one exceeded answers 429 with Retry-After. Counters live in the plugin's store: this process's, or with
 * REDIS_URL Redis's, shared by the nodes (platform/rate-limit-redis.ts).
 */
export function limits(app: App, ...specs: LimitSpec[]): preHandlerAsyncHookHandler {
  const limiters = specs.map((s) => app.createRateLimit({ max: s.max, timeWindow: s.timeWindowMs, keyGenerator: s.key }));
  return async function rateLimit(request) {
    for (const check of limiters) {
      const result = await check(request);
      if (!result.isAllowed && result.isExceeded) throw rateLimited(result.ttlInSeconds);
    }
  };
}
