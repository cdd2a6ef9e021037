// One prom-client registry per service, with the service label on every series. Platform
// metrics are named strata_*; process and Node runtime metrics keep prom-client's names.
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';

export { AggregatorRegistry, Counter, Gauge, Histogram, Registry } from 'prom-client';

// Seconds. Finer than prom-client's default below 10 ms, where healthy hops live.
export const LATENCY_BUCKETS_SECONDS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
];

export interface ServiceMetrics {
  registry: Registry;
  /**
   * What GET /metrics answers, when not `registry` alone: a service whose requests are served on
   * several threads (the inference backend's HTTP workers) sums their registries here.
   */
  exposition?: () => Promise<string>;
  httpRequests: Counter<'method' | 'route' | 'status'>;
  httpDuration: Histogram<'method' | 'route' | 'status'>;
}

/** The text GET /metrics answers with (ServiceMetrics.exposition, else the registry's). */
export function metricsText(metrics: ServiceMetrics): Promise<string> {
  return metrics.exposition ? metrics.exposition() : metrics.registry.metrics();
}

export function createMetrics(service: string, options: { defaultMetrics?: boolean } = {}): ServiceMetrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry });
  return {
    registry,
    httpRequests: new Counter({
      name: 'strata_http_requests_total',
      help: 'HTTP requests served, by route template and status code.',
      labelNames: ['method', 'route', 'status'],
      registers: [registry],
    }),
    httpDuration: new Histogram({
      name: 'strata_http_request_duration_seconds',
      help: 'Time from request received to response finished, in seconds.',
      labelNames: ['method', 'route', 'status'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers: [registry],
    }),
  };
}
