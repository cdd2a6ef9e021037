import { type BootContext, createServiceApp, registerOpenApi } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import type { RouterDeps } from './router.js';
import { inferenceRoutes } from './routes/inference.js';

// Layer 2: decides which backend serves each request and logs why. Bodies are forwarded as
// they came, byte for byte (the edge validated them); the router only reads what its rules
// look at.
export function buildApp(
  ctx: Omit<BootContext<Config>, 'telemetry'>,
  deps: Omit<RouterDeps, 'metrics'>,
): FastifyInstance {
  const app = createServiceApp({
    name: 'router-service',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
    bodyLimit: 8 * 1024 * 1024,
    traceRequests: 'continue',
  });
  // Before the routes: @fastify/swagger collects them as they are registered.
  registerOpenApi(app, { title: 'Strata router', version: '0.1.0' });
  app.register(inferenceRoutes, { ...deps, metrics: ctx.metrics });
  return app;
}
