import type { AddressInfo } from 'node:net';
import { bootService, ConfigError } from '@strata/common';
import { buildApp } from './app.js';
import { CONFIG_FILE_ENV, type Config, configEnv, configSchema } from './config.js';
import { HttpWorkerPool } from './inference/http-workers.js';
import { ModelHost } from './inference/model-host.js';
import { loadNativeAddon } from './native.js';

let host: ModelHost | undefined;
let workers: HttpWorkerPool | undefined;
let config: Config | undefined;
const app = await bootService({
  name: 'inference-backend',
  schema: configSchema,
  envMap: configEnv,
  fileEnv: CONFIG_FILE_ENV,
  build: (ctx) => {
    config = ctx.config;
    host = new ModelHost(ctx.config, ctx.readiness, ctx.logger, undefined, ctx.telemetry.tracer);
    if (ctx.config.httpWorkers > 1) {
      // SO_REUSEPORT spreads connections over the loops on Linux; elsewhere say so at start.
      if (process.platform !== 'linux')
        throw new ConfigError('environment', [
          `httpWorkers (STRATA_HTTP_WORKERS=${ctx.config.httpWorkers}): several event loops on one port need SO_REUSEPORT as Linux has it, not ${process.platform}; use 1`,
        ]);
      const pool = new HttpWorkerPool({
        config: ctx.config,
        logger: ctx.logger,
        readiness: ctx.readiness,
        host,
        registry: ctx.metrics.registry,
      });
      ctx.metrics.exposition = () => pool.exposition();
      workers = pool;
    }
    return buildApp(ctx, { addon: loadNativeAddon(), host });
  },
  // The worker threads listen on the same port.
  reusePort: (c) => c.httpWorkers > 1,
  cleanup: async () => {
    // The workers drain from the moment the main thread does; the engine closes after them.
    await workers?.drain();
    await host?.close();
  },
});
// Listening: load and warm up the model; /health/ready turns 200 when both are done (and, with
// STRATA_HTTP_WORKERS, once every worker thread listens too).
await host?.start();
const runtime = host?.state === 'ready' ? host.loaded : undefined;
if (workers && runtime && config && !app.readiness.draining) {
  const { port } = app.server.address() as AddressInfo;
  await workers.start(runtime.share(), config.host, port);
}
