import { bootService } from '@strata/common';
import { buildApp } from './app.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from './config.js';
import { ModelHost } from './inference/model-host.js';
import { loadNativeAddon } from './native.js';

let host: ModelHost | undefined;
await bootService({
  name: 'inference-backend',
  schema: configSchema,
  envMap: configEnv,
  fileEnv: CONFIG_FILE_ENV,
  build: (ctx) => {
    host = new ModelHost(ctx.config, ctx.readiness, ctx.logger, undefined, ctx.telemetry.tracer);
    return buildApp(ctx, { addon: loadNativeAddon(), host });
  },
  cleanup: async () => {
    await host?.close();
  },
});
// Listening: load and warm up the model; /health/ready turns 200 when both are done.
await host?.start();
