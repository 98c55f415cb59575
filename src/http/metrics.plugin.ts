import type { FastifyInstance } from 'fastify';
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { safeEqualText } from '../shared/crypto.js';
import { unauthenticated } from '../shared/errors.js';

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

const isProxied = (headers: Record<string, unknown>) => headers['x-forwarded-for'] !== undefined || headers.forwarded !== undefined || headers['x-real-ip'] !== undefined;

export interface MetricsOptions {
  /** Bearer token required from every caller; without it only loopback callers are answered. */
  token?: string;
}

/**
 * Prometheus metrics at /metrics: request counts and latency histograms per route template.
 * Who may read them: with METRICS_TOKEN, whoever sends `Authorization: Bearer <token>`; without it,
 * only callers on the loopback interface (a scraper on the same host or a sidecar) whose request no
 * proxy forwarded (no X-Forwarded-For / Forwarded / X-Real-IP); anyone else 401.
 */
export function registerMetrics(app: FastifyInstance, options: MetricsOptions = {}): Registry {
  // A registry per app instance, so that several apps in one process (tests) do not collide.
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({
    name: 'http_requests_total',
    help: 'HTTP requests by method, route template and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request latency by method and route template',
    labelNames: ['method', 'route'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });

  app.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? 'unmatched';
    if (route !== '/metrics') {
      requests.inc({ method: request.method, route, status: String(reply.statusCode) });
      duration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
    }
    done();
  });

  app.get('/metrics', { schema: { hide: true } }, async (request, reply) => {
    if (options.token) {
      const header = request.headers.authorization;
      const presented = typeof header === 'string' ? /^Bearer\s+(.+)$/i.exec(header.trim())?.[1] : undefined;
      if (!presented || !safeEqualText(presented, options.token)) throw unauthenticated('/metrics needs Authorization: Bearer <METRICS_TOKEN>');
    } else if (!LOOPBACK.has(request.socket.remoteAddress ?? '') || !LOOPBACK.has(request.ip) || isProxied(request.headers)) {
      // A request a local reverse proxy forwarded also arrives from loopback: it carries a forwarding header.
      throw unauthenticated('/metrics answers loopback callers only; set METRICS_TOKEN to scrape it from elsewhere');
    }
    reply.header('content-type', registry.contentType);
    return registry.metrics();
  });
  return registry;
}
