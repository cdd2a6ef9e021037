import { type BootContext, createServiceApp, Gauge } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import type { NativeAddon } from './native.js';

// Layer 3's HTTP face. For now: the service base plus what the native addon reports about
// the machine. Inference routes arrive with the engine; until then the backend never claims
// to be ready, because it has no model to serve.
export function buildApp(ctx: Omit<BootContext<Config>, 'telemetry'>, addon: NativeAddon): FastifyInstance {
  const app = createServiceApp({
    name: 'inference-backend',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
  });
  const build = addon.buildInfo();
  const cuda = addon.cudaInfo();
  ctx.logger.info({ native: build, cuda }, 'native addon loaded');
  new Gauge({
    name: 'strata_backend_cuda_devices',
    help: 'CUDA devices the native addon can use (0 on CPU-only machines or builds).',
    labelNames: ['cuda_compiled'],
    registers: [ctx.metrics.registry],
  }).set({ cuda_compiled: String(build.cuda) }, cuda.devices.length);
  ctx.readiness.set('model_loaded', false, 'no model loaded: the native engine does not serve models yet');
  return app;
}
