import { bootService } from '@strata/common';
import { buildApp } from './app.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from './config.js';
import { buildEdgeParts, type EdgeWiring } from './wiring.js';

let wiring: EdgeWiring | undefined;
await bootService({
  name: 'edge-gateway',
  schema: configSchema,
  envMap: configEnv,
  fileEnv: CONFIG_FILE_ENV,
  build: async (ctx) => {
    wiring = await buildEdgeParts(ctx.config, ctx.logger, ctx.metrics.registry);
    return buildApp(ctx, wiring.parts);
  },
  cleanup: async () => {
    await wiring?.close();
  },
});
