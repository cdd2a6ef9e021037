import { bootService } from '@strata/common';
import { buildApp } from './app.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from './config.js';
import { loadNativeAddon } from './native.js';

await bootService({
  name: 'inference-backend',
  schema: configSchema,
  envMap: configEnv,
  fileEnv: CONFIG_FILE_ENV,
  build: (ctx) => buildApp(ctx, loadNativeAddon()),
});
