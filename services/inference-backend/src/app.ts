import { type BootContext, createServiceApp, Gauge } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Config } from './config.js';
import type { ModelHost } from './inference/model-host.js';
import type { NativeAddon } from './native.js';
import { generateRoutes } from './routes/generate.js';

export interface BackendParts {
  addon: NativeAddon;
  host: ModelHost;
}

// Layer 3's HTTP face: the service base, then the inference routes, which validate with the
// shared zod schemas in their own plugin scope (the base routes keep their JSON schemas).
export function buildApp(ctx: Omit<BootContext<Config>, 'telemetry'>, parts: BackendParts): FastifyInstance {
  const app = createServiceApp({
    name: 'inference-backend',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
    bodyLimit: 8 * 1024 * 1024,
  });
  const build = parts.addon.buildInfo();
  const cuda = parts.addon.cudaInfo();
  ctx.logger.info({ native: build, cuda }, 'native addon loaded');
  new Gauge({
    name: 'strata_backend_cuda_devices',
    help: 'CUDA devices the native addon can use (0 on CPU-only machines or builds).',
    labelNames: ['cuda_compiled'],
    registers: [ctx.metrics.registry],
  }).set({ cuda_compiled: String(build.cuda) }, cuda.devices.length);

  app.register(async (scope) => {
    scope.setValidatorCompiler(validatorCompiler);
    scope.setSerializerCompiler(serializerCompiler);
    // routes:
    await scope.register(generateRoutes, {
      host: parts.host,
      sseHeartbeatMs: ctx.config.limits.sseHeartbeatMs,
    });
  });
  return app;
}
