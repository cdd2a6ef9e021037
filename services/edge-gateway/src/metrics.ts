// strata_edge_*: what the front door let through, what it refused and why, and how long the
// router took to answer. Quota series live with the quotas (quota/quotas.ts).
import { Counter, type ErrorCode, Histogram, LATENCY_BUCKETS_SECONDS, type Registry } from '@strata/common';
import type { ForwardOutcome } from './proxy/forward.js';

export type RejectionReason =
  | 'auth'
  | 'validation'
  | 'size'
  | 'content_type'
  | 'rate'
  | 'quota'
  | 'quota_store'
  | 'not_found';

/** Why the edge refused a request, from the catalogue code it answered with. */
export function rejectionReason(code: ErrorCode): RejectionReason {
  switch (code) {
    case 'STRATA_UNAUTHORIZED':
    case 'STRATA_FORBIDDEN':
      return 'auth';
    case 'STRATA_BODY_TOO_LARGE':
      return 'size';
    case 'STRATA_UNSUPPORTED_MEDIA_TYPE':
      return 'content_type';
    case 'STRATA_RATE_LIMITED':
      return 'rate';
    case 'STRATA_QUOTA_EXCEEDED':
      return 'quota';
    case 'STRATA_QUOTA_UNAVAILABLE':
      return 'quota_store';
    case 'STRATA_NOT_FOUND':
    case 'STRATA_METHOD_NOT_ALLOWED':
      return 'not_found';
    default:
      return 'validation';
  }
}

export interface EdgeMetrics {
  requests: Counter<'endpoint' | 'outcome'>;
  rejections: Counter<'code' | 'reason'>;
  upstreamSeconds: Histogram<'endpoint'>;
}

export type RequestOutcome = ForwardOutcome | 'rejected';

export function createEdgeMetrics(registry: Registry): EdgeMetrics {
  const registers = [registry];
  return {
    requests: new Counter({
      name: 'strata_edge_requests_total',
      help: 'Requests on the public endpoints, by endpoint and outcome (forwarded, rejected, upstream_error, client_closed).',
      labelNames: ['endpoint', 'outcome'],
      registers,
    }),
    rejections: new Counter({
      name: 'strata_edge_rejections_total',
      help: 'Requests the edge answered with an error itself, by catalogue code and reason.',
      labelNames: ['code', 'reason'],
      registers,
    }),
    upstreamSeconds: new Histogram({
      name: 'strata_edge_upstream_duration_seconds',
      help: "From forwarding to the router's response headers, in seconds.",
      labelNames: ['endpoint'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers,
    }),
  };
}
