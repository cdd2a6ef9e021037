// GET /load: the compact load report the router polls (DESIGN.md §3), cheaper than /metrics.
// Always 200: while the model loads or warms up it answers with ready false and zeros.
import type { Readiness } from '@strata/common';
import type { FastifyPluginAsync } from 'fastify';
import type { ModelHost } from '../inference/model-host.js';

export interface LoadRouteOptions {
  host: ModelHost;
  readiness: Readiness;
  modelName: string;
}

export interface LoadReport {
  model: string;
  /** /health/ready's answer: model loaded, warmed up and not draining. */
  ready: boolean;
  running: number;
  /** Queued in the engine, preempted ones included. */
  waiting: number;
  /** Admitted by this backend and not finished (running + waiting + not yet submitted). */
  live_requests: number;
  /** Used KV blocks / total, 0..1. */
  kv_usage: number;
  /** Blocks a new request can take: free ones plus cached ones no request holds (evictable). */
  kv_blocks_free: number;
  kv_blocks_total: number;
  /** When this report was taken (epoch ms): the router treats old reports as unknown. */
  timestamp_ms: number;
}

const count = { type: 'integer', minimum: 0 } as const;
export const loadReportSchema = {
  type: 'object',
  required: [
    'model',
    'ready',
    'running',
    'waiting',
    'live_requests',
    'kv_usage',
    'kv_blocks_free',
    'kv_blocks_total',
    'timestamp_ms',
  ],
  additionalProperties: false,
  properties: {
    model: { type: 'string' },
    ready: { type: 'boolean' },
    running: count,
    waiting: count,
    live_requests: count,
    kv_usage: { type: 'number', minimum: 0, maximum: 1 },
    kv_blocks_free: count,
    kv_blocks_total: count,
    timestamp_ms: count,
  },
} as const;

export const loadRoutes: FastifyPluginAsync<LoadRouteOptions> = async (app, options) => {
  app.get(
    '/load',
    {
      schema: { summary: 'Compact load report for the router', response: { 200: loadReportSchema } },
      logLevel: 'warn',
    },
    async (): Promise<LoadReport> => {
      const runtime = options.host.loaded;
      const s = runtime?.engine.stats();
      return {
        model: options.modelName,
        ready: options.readiness.ready,
        running: s?.numRunning ?? 0,
        waiting: s?.numWaiting ?? 0,
        live_requests: runtime?.liveRequests ?? 0,
        kv_usage: s?.kvUsage ?? 0,
        kv_blocks_free: s ? s.kvBlocksTotal - s.kvBlocksUsed : 0,
        kv_blocks_total: s?.kvBlocksTotal ?? 0,
        timestamp_ms: Date.now(),
      };
    },
  );
};
