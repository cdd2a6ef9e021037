import { bootService } from '@strata/common';
import { buildApp } from './app.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from './config.js';
import { buildRouterParts, type RouterParts } from './wiring.js';

let parts: RouterParts | undefined;
await bootService({
  name: 'router-service',
  schema: configSchema,
  envMap: configEnv,
  fileEnv: CONFIG_FILE_ENV,
  build: async (ctx) => {
    parts = await buildRouterParts(ctx.config, ctx.logger, ctx.metrics.registry);
    return buildApp(ctx, parts.deps);
  },
  cleanup: async () => {
    await parts?.close();
  },
});
