import { createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { configEnv, configSchema } from '../src/config.js';
import { loadNativeAddon } from '../src/native.js';

function build() {
  const config = loadConfig({ schema: configSchema, envMap: configEnv, env: {} });
  const logger = createLogger({ service: 'inference-backend', level: 'silent' });
  return buildApp(
    { config, logger, metrics: createMetrics('inference-backend'), readiness: new Readiness() },
    loadNativeAddon(),
  );
}

describe('inference-backend app', () => {
  it('listens on 8000 by default, like vLLM', () => {
    expect(loadConfig({ schema: configSchema, envMap: configEnv, env: {} }).port).toBe(8000);
    expect(loadConfig({ schema: configSchema, envMap: configEnv, env: { PORT: '8123' } }).port).toBe(8123);
  });

  it('is live but never ready while no model is loaded', async () => {
    const app = build();
    expect((await app.inject('/health/live')).statusCode).toBe(200);
    const ready = await app.inject('/health/ready');
    expect(ready.statusCode).toBe(503);
    expect(ready.json().checks.model_loaded).toEqual({
      ok: false,
      detail: 'no model loaded: the native engine does not serve models yet',
    });
  });

  it('exports the CUDA device count the addon sees', async () => {
    const app = build();
    const devices = loadNativeAddon().cudaInfo().devices.length;
    const cuda = String(loadNativeAddon().buildInfo().cuda);
    expect((await app.inject('/metrics')).body).toContain(
      `strata_backend_cuda_devices{cuda_compiled="${cuda}",service="inference-backend"} ${devices}`,
    );
  });
});
