import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { baseServiceEnv, baseServiceSchema, ConfigError, configFields, loadConfig } from '../src/config.js';

const schema = baseServiceSchema.extend({
  redis: z
    .object({ url: z.url().optional(), enabled: configFields.boolean(false) })
    .default({ enabled: false }),
});
const envMap = { ...baseServiceEnv, 'redis.url': 'REDIS_URL', 'redis.enabled': 'STRATA_REDIS_ENABLED' };

const tempDirs: string[] = [];
afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

function yamlFile(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'strata-config-'));
  tempDirs.push(dir);
  const file = join(dir, 'config.yaml');
  writeFileSync(file, text);
  return file;
}

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('loadConfig', () => {
  it('applies defaults when nothing is configured', () => {
    const config = loadConfig({ schema, envMap, env: {} });
    expect(config).toEqual({
      host: '0.0.0.0',
      port: 0,
      logLevel: 'info',
      drainTimeoutMs: 30_000,
      http: {
        maxJsonDepth: 128,
        headersTimeoutMs: 10_000,
        requestTimeoutMs: 30_000,
        keepAliveTimeoutMs: 72_000,
      },
      redis: { enabled: false },
    });
  });

  it('reads YAML and lets the environment override it, coercing strings', () => {
    const file = yamlFile('port: 8080\nlogLevel: debug\nredis:\n  url: redis://a:6379\n');
    const config = loadConfig({
      schema,
      envMap,
      fileEnv: 'STRATA_CONFIG',
      env: { STRATA_CONFIG: file, PORT: '9090', STRATA_REDIS_ENABLED: 'true' },
    });
    expect(config.port).toBe(9090);
    expect(config.logLevel).toBe('debug');
    expect(config.redis).toEqual({ url: 'redis://a:6379', enabled: true });
  });

  it('names every bad field in one error, with the env variable that set it', () => {
    const file = yamlFile('logLevel: loud\ndrainTimeoutMs: -5\n');
    const err = configError(() =>
      loadConfig({ schema, envMap, file, env: { PORT: 'eighty', STRATA_REDIS_ENABLED: 'maybe' } }),
    );
    expect(err.problems).toHaveLength(4);
    const text = err.message;
    expect(text).toContain(`invalid configuration (file ${file} + environment): 4 problems`);
    expect(text).toMatch(/port \(env PORT\): .*number/i);
    expect(text).toMatch(/logLevel \(env LOG_LEVEL\): /);
    expect(text).toMatch(/drainTimeoutMs \(env STRATA_DRAIN_TIMEOUT_MS\): .*>0/);
    expect(text).toMatch(/redis\.enabled \(env STRATA_REDIS_ENABLED\): /);
  });

  it('rejects a file that cannot be read or parsed, or is not a mapping', () => {
    expect(
      configError(() => loadConfig({ schema, file: '/nonexistent/strata.yaml', env: {} })).message,
    ).toContain('cannot read the file');
    expect(
      configError(() => loadConfig({ schema, file: yamlFile('port: [1,\n'), env: {} })).message,
    ).toContain('not valid YAML');
    expect(
      configError(() => loadConfig({ schema, file: yamlFile('- 1\n- 2\n'), env: {} })).message,
    ).toContain('top level must be a mapping');
  });

  it('treats an empty file as no settings', () => {
    expect(loadConfig({ schema, file: yamlFile(''), env: {} }).port).toBe(0);
  });
});
