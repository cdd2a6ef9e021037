import { bootService } from '@strata/common';
import { buildApp } from './app.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from './config.js';

await bootService({
  name: 'observability',
  schema: configSchema,
  envMap: configEnv,
  fileEnv: CONFIG_FILE_ENV,
  build: buildApp,
});
