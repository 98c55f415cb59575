import type { FastifyInstance } from 'fastify';
import { Registry, collectDefaultMetrics } from 'prom-client';
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
  const recorder = new RequestMetrics();
  registry.registerMetric(recorder.counter as never);
  registry.registerMetric(recorder.histogram as never);

  app.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? 'unmatched';
    if (route !== '/metrics') recorder.record(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
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

/** Upper bounds (seconds) of the latency histogram's buckets. */
const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;

interface RouteRecord {
  readonly method: string;
  readonly route: string;
  /** Requests per status code. */
  readonly statuses: Map<number, number>;
  /** Observations per bucket (not cumulative); the last slot is above the largest bound. */
  readonly buckets: Float64Array;
  sum: number;
  count: number;
}

type MetricValue = { labels: Record<string, string | number>; value: number; metricName?: string };

/**
 * `http_requests_total` (counter by method, route template and status) and `http_request_duration_seconds`
 * (histogram by method and route template), in prom-client's exposition. prom-client's own Counter and
 * Histogram hash their label object, validate it and look a float bucket key up as a string on every
 * observation: ~6 µs of server CPU per request under load, the largest of the app's per-request costs
 * (bench/RESULTS.md). Here a request costs one map lookup, an increment and a bucket search; the labels
 * are formatted only when /metrics is read.
 */
export class RequestMetrics {
  private readonly routes = new Map<string, RouteRecord>();

  record(method: string, route: string, status: number, seconds: number): void {
    const key = `${method} ${route}`;
    let entry = this.routes.get(key);
    if (!entry) {
      entry = { method, route, statuses: new Map(), buckets: new Float64Array(DURATION_BUCKETS.length + 1), sum: 0, count: 0 };
      this.routes.set(key, entry);
    }
    entry.statuses.set(status, (entry.statuses.get(status) ?? 0) + 1);
    let bucket = 0;
    while (bucket < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[bucket]!) bucket++;
    entry.buckets[bucket]! += 1;
    entry.sum += seconds;
    entry.count += 1;
  }

  /** The counter and the histogram as prom-client metrics (registered with `registry.registerMetric`). */
  readonly counter = this.metric('http_requests_total', 'HTTP requests by method, route template and status code', 'counter', () => this.counterValues());
  readonly histogram = this.metric('http_request_duration_seconds', 'HTTP request latency by method and route template', 'histogram', () => this.histogramValues());

  private metric(name: string, help: string, type: 'counter' | 'histogram', values: () => MetricValue[]) {
    return { name, help, type, get: () => ({ name, help, type, aggregator: 'sum', values: values() }), reset: () => this.routes.clear() };
  }

  private counterValues(): MetricValue[] {
    const values: MetricValue[] = [];
    for (const { method, route, statuses } of this.routes.values()) {
      for (const [status, count] of statuses) values.push({ labels: { method, route, status: String(status) }, value: count });
    }
    return values;
  }

  private histogramValues(): MetricValue[] {
    const name = this.histogram.name;
    const values: MetricValue[] = [];
    for (const { method, route, buckets, sum, count } of this.routes.values()) {
      let cumulative = 0;
      DURATION_BUCKETS.forEach((le, i) => {
        cumulative += buckets[i]!;
        values.push({ metricName: `${name}_bucket`, labels: { le, method, route }, value: cumulative });
      });
      values.push({ metricName: `${name}_bucket`, labels: { le: '+Inf', method, route }, value: count });
      values.push({ metricName: `${name}_sum`, labels: { method, route }, value: sum });
      values.push({ metricName: `${name}_count`, labels: { method, route }, value: count });
    }
    return values;
  }
}
