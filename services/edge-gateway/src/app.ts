import { type BootContext, createServiceApp } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';

// Layer 1: request validation, auth and per-tenant quotas behind Envoy.
// For now the service base only: health, readiness, metrics, logs and graceful shutdown.
export function buildApp(ctx: Omit<BootContext<Config>, 'telemetry'>): FastifyInstance {
  return createServiceApp({
    name: 'edge-gateway',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
  });
}
