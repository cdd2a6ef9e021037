import { type BootContext, createServiceApp } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';

// Layer 2: picks the backend for each request and logs why.
// For now the service base only: health, readiness, metrics, logs and graceful shutdown.
export function buildApp(ctx: Omit<BootContext<Config>, 'telemetry'>): FastifyInstance {
  return createServiceApp({
    name: 'router-service',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
  });
}
