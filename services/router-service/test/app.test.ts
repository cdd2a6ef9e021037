import { createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from '../src/config.js';
import { buildRouterParts } from '../src/wiring.js';

describe('router-service app', () => {
  it('defaults to port 8081 and reads STRATA_ROUTER_CONFIG', () => {
    expect(loadConfig({ schema: configSchema, envMap: configEnv, env: {} }).port).toBe(8081);
    expect(CONFIG_FILE_ENV).toBe('STRATA_ROUTER_CONFIG');
  });

  it('reads the load freshness limit from STRATA_LOAD_MAX_AGE_MS, 250 ms by default', () => {
    const load = (env: Record<string, string>) =>
      loadConfig({ schema: configSchema, envMap: configEnv, env }).health.loadMaxAgeMs;
    expect(load({})).toBe(250);
    expect(load({ STRATA_LOAD_MAX_AGE_MS: '400' })).toBe(400);
    expect(() => load({ STRATA_LOAD_MAX_AGE_MS: '0' })).toThrow(/health\.loadMaxAgeMs/);
  });

  it('is live, ready until draining, and labels its metrics', async () => {
    const config = loadConfig({ schema: configSchema, envMap: configEnv, env: {} });
    const logger = createLogger({ service: 'router-service', level: 'silent' });
    const readiness = new Readiness();
    const metrics = createMetrics('router-service');
    const parts = await buildRouterParts(config, logger, metrics.registry);
    const app = buildApp({ config, logger, metrics, readiness }, parts.deps);
    try {
      expect((await app.inject('/health/live')).statusCode).toBe(200);
      expect((await app.inject('/health/ready')).statusCode).toBe(200);
      readiness.startDraining();
      expect((await app.inject('/health/ready')).json()).toEqual({
        ready: false,
        draining: true,
        checks: {},
      });
      expect((await app.inject('/metrics')).body).toContain('service="router-service"');
    } finally {
      await app.close();
      await parts.close();
    }
  });
});
