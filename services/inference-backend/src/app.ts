import {
  type BootContext,
  createServiceApp,
  Gauge,
  registerIdentityGuard,
  registerOpenApi,
} from '@strata/common';
import type { FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Config } from './config.js';

import type { ModelHost } from './inference/model-host.js';
import { servedModelName } from './inference/runtime.js';
import type { NativeAddon } from './native.js';
import { registerEngineMetrics } from './observability/engine-metrics.js';
import { generateRoutes } from './routes/generate.js';
import { loadRoutes } from './routes/load.js';
import { chatRoutes } from './routes/openai-chat.js';
import { completionsRoutes } from './routes/openai-completions.js';
import { modelsRoutes } from './routes/openai-models.js';

export interface BackendParts {
  addon: NativeAddon;
  host: ModelHost;
  /**
   * An HTTP worker thread's app (STRATA_HTTP_WORKERS): the engine's metrics and the CUDA gauge
   * are the main thread's, which sums every loop's registry at a scrape.
   */
  worker?: boolean;
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
  if (!parts.worker) {
    const build = parts.addon.buildInfo();
    const cuda = parts.addon.cudaInfo();
    ctx.logger.info({ native: build, cuda }, 'native addon loaded');
    new Gauge({
      name: 'strata_backend_cuda_devices',
      help: 'CUDA devices the native addon can use (0 on CPU-only machines or builds).',
      labelNames: ['cuda_compiled'],
      registers: [ctx.metrics.registry],
    }).set({ cuda_compiled: String(build.cuda) }, cuda.devices.length);
  }

  // Before the routes: @fastify/swagger collects them as they are registered.
  registerOpenApi(app, { title: 'Strata inference backend', version: '0.1.0' });

  // Engine metrics (vllm:*) on the service registry, and the router's GET /load.
  const modelName = servedModelName(ctx.config);
  if (!parts.worker) registerEngineMetrics(ctx.metrics.registry, parts.host, modelName);

  app.register(async (scope) => {
    scope.setValidatorCompiler(validatorCompiler);
    scope.setSerializerCompiler(serializerCompiler);
    // routes:
    await scope.register(loadRoutes, { host: parts.host, readiness: ctx.readiness, modelName });
    // The inference routes take tenant (the prefix-cache namespace) and priority from the
    // edge's signed identity only; /load stays open to the routers' polls.
    await scope.register(async (inference) => {
      registerIdentityGuard(inference, {
        keys: ctx.config.identity.keys,
        mode: ctx.config.identity.mode,
        registry: ctx.metrics.registry,
        metricName: 'strata_backend_identity_total',
        announce: !parts.worker,
      });
      const options = { host: parts.host, sseHeartbeatMs: ctx.config.limits.sseHeartbeatMs };
      await inference.register(generateRoutes, options);
      await inference.register(completionsRoutes, options);
      await inference.register(chatRoutes, options);
      await inference.register(modelsRoutes, options);
    });
  });
  return app;
}
