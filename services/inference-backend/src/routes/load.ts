// GET /load: the compact load report the router polls (docs/architecture.md, Wire contracts),
// cheaper than /metrics. Always 200: while the model loads or warms up it answers with ready
// false and zeros.
import { type LoadReport, loadReportSchema, type Readiness } from '@strata/common';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { ModelHost } from '../inference/model-host.js';

export interface LoadRouteOptions {
  host: ModelHost;
  readiness: Readiness;
  modelName: string;
}

export const loadRoutes: FastifyPluginAsyncZod<LoadRouteOptions> = async (app, options) => {
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
