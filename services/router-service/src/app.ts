import { type BootContext, createServiceApp } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import { createRouter, type RouterDeps } from './router.js';

// Layer 2: decides which backend serves each request and logs why. Bodies are forwarded as
// they came (the edge validated them); the router only reads what its rules look at.
export function buildApp(
  ctx: Omit<BootContext<Config>, 'telemetry'>,
  deps?: Omit<RouterDeps, 'metrics'>,
): FastifyInstance {
  const app = createServiceApp({
    name: 'router-service',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
    bodyLimit: 8 * 1024 * 1024,
    traceRequests: 'continue',
  });
  if (!deps) return app;
  const route = createRouter({ ...deps, metrics: ctx.metrics });
  for (const path of ['/v1/generate', '/v1/completions', '/v1/chat/completions']) {
    app.post(path, (request, reply) => route(request, reply, path));
  }
  app.get('/v1/models', (request, reply) => route(request, reply, '/v1/models'));
  return app;
}
