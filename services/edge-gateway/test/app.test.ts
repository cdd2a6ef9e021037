import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import { serviceEntry } from '@strata/common/testing';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from '../src/config.js';
import { buildEdgeParts } from '../src/wiring.js';

describe('edge-gateway config', () => {
  it('has local defaults and reads STRATA_EDGE_CONFIG', () => {
    const config = loadConfig({ schema: configSchema, envMap: configEnv, env: {} });
    expect(config).toMatchObject({
      port: 8080,
      routerUrl: 'http://127.0.0.1:8081',
      maxBodyBytes: 1048576,
      quota: { failMode: 'open', requestsPerMinute: 600, tokensPerMinute: 1_000_000 },
      upstream: { headersTimeoutMs: 300_000, connections: 512 },
    });
    expect(config.tenantsFile).toBeUndefined();
    expect(config.quota.redisUrl).toBeUndefined();
    expect(CONFIG_FILE_ENV).toBe('STRATA_EDGE_CONFIG');
  });

  it('names every bad setting and the variable that set it', () => {
    const env = {
      STRATA_ROUTER_URL: 'router',
      STRATA_EDGE_QUOTA_FAIL_MODE: 'maybe',
      STRATA_EDGE_DEFAULT_RPM: '-1',
    };
    let error: unknown;
    try {
      loadConfig({ schema: configSchema, envMap: configEnv, env });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      'routerUrl (env STRATA_ROUTER_URL): Invalid URL',
      'quota.failMode (env STRATA_EDGE_QUOTA_FAIL_MODE): Invalid option: expected one of "open"|"closed"',
      'quota.requestsPerMinute (env STRATA_EDGE_DEFAULT_RPM): Too small: expected number to be >=0',
    ]);
  });

  it('stops at start with every problem of a bad tenants file (exit 2)', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'edge-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - name: Bad Name\n    keys: []\n');
    const run = spawnSync(process.execPath, [serviceEntry('@strata/edge-gateway', import.meta.url)], {
      env: { ...process.env, PORT: '0', HOST: '127.0.0.1', STRATA_EDGE_TENANTS_FILE: file },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(run.status).toBe(2);
    expect(run.stderr).toBe(
      `edge-gateway: invalid configuration (file ${file}): 2 problems\n` +
        '  - tenants.0.name: a tenant name is 1-63 of a-z 0-9 . _ -\n' +
        '  - tenants.0.keys: Too small: expected array to have >=1 items\n',
    );
  });
});

describe('edge-gateway app', () => {
  it('is live, ready until draining, and labels its metrics', async () => {
    const config = loadConfig({ schema: configSchema, envMap: configEnv, env: {} });
    const logger = createLogger({ service: 'edge-gateway', level: 'silent' });
    const metrics = createMetrics('edge-gateway');
    const readiness = new Readiness();
    const wiring = await buildEdgeParts(config, logger, metrics.registry);
    const app = buildApp({ config, logger, metrics, readiness }, wiring.parts);
    try {
      expect((await app.inject('/health/live')).statusCode).toBe(200);
      expect((await app.inject('/health/ready')).statusCode).toBe(200);
      const doc = (await app.inject('/openapi.json')).json() as { paths: Record<string, unknown> };
      expect(Object.keys(doc.paths)).toEqual([
        '/v1/generate',
        '/v1/completions',
        '/v1/chat/completions',
        '/v1/models',
      ]);
      readiness.startDraining();
      expect((await app.inject('/health/ready')).json()).toEqual({
        ready: false,
        draining: true,
        checks: {},
      });
      const text = (await app.inject('/metrics')).body;
      expect(text).toContain('service="edge-gateway"');
      expect(text).toContain('strata_edge_quota_store_up{service="edge-gateway"} 1');
    } finally {
      await app.close();
      await wiring.close();
    }
  });
});
