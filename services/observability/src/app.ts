import { type BootContext, createServiceApp } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import { statusRoutes } from './routes/status.js';
import { createSidecar, type Sidecar } from './sidecar.js';

declare module 'fastify' {
  interface FastifyInstance {
    sidecar: Sidecar;
  }
}

export interface BuildOptions {
  /** Start the poll loops (default true); tests that drive polls by hand pass false. */
  poll?: boolean;
}

// Layer 4, one per backend pod: GPU telemetry, the backend's engine state and the saturation
// diagnosis, as /metrics and /status. Never on the request path.
export function buildApp(
  ctx: Omit<BootContext<Config>, 'telemetry'>,
  options: BuildOptions = {},
): FastifyInstance {
  const app = createServiceApp({
    name: 'observability',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
  });
  const sidecar = createSidecar(ctx.config, ctx.logger, ctx.metrics.registry, ctx.readiness);
  app.decorate('sidecar', sidecar);
  app.register(statusRoutes, { sidecar });
  if (options.poll ?? true) sidecar.start();
  app.addHook('onClose', async () => sidecar.stop());
  return app;
}
