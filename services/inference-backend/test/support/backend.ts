// A real backend for tests: the service app on port 0 with the real engine on a real model.
import type { AddressInfo } from 'node:net';
import { createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { buildApp } from '../../src/app.js';
import { type Config, configEnv, configSchema } from '../../src/config.js';
import { ModelHost } from '../../src/inference/model-host.js';
import { loadNativeAddon } from '../../src/native.js';
import { modelPath } from './models.js';

export interface TestBackend {
  app: FastifyInstance;
  host: ModelHost;
  config: Config;
  url: string;
  close(): Promise<void>;
}

/** Environment-style settings (see src/config.ts configEnv) on top of tinystories-656k. */
export async function startBackend(
  env: Record<string, string> = {},
  options: { waitReady?: boolean } = {},
): Promise<TestBackend> {
  const config = loadConfig({
    schema: configSchema,
    envMap: configEnv,
    env: {
      ...(env.STRATA_MODEL_DIR === undefined ? { STRATA_MODEL_DIR: modelPath('tinystories-656k') } : {}),
      STRATA_KV_CACHE_BLOCKS: '512',
      ...env,
    },
  });
  const logger = createLogger({ service: 'inference-backend', level: 'silent' });
  const metrics = createMetrics('inference-backend');
  const readiness = new Readiness();
  const host = new ModelHost(config, readiness, logger);
  const app = buildApp({ config, logger, metrics, readiness }, { addon: loadNativeAddon(), host });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const started = host.start();
  if (options.waitReady ?? true) await started;
  const { port } = app.server.address() as AddressInfo;
  return {
    app,
    host,
    config,
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      await started;
      await app.close();
      await host.close();
    },
  };
}

/**
 * A backend on a model file (the tests' SmolLM2 GGUF) with the official `openai` client pointed at
 * it: no warmup, a 1,024-token context, `env` on top.
 */
export async function startOpenAiBackend(
  modelPath: string,
  env: Record<string, string> = {},
): Promise<{ backend: TestBackend; client: OpenAI }> {
  const backend = await startBackend({
    STRATA_WARMUP: 'false',
    STRATA_MODEL_DIR: modelPath,
    STRATA_MAX_MODEL_LEN: '1024',
    ...env,
  });
  return { backend, client: new OpenAI({ baseURL: `${backend.url}/v1`, apiKey: 'unused', maxRetries: 0 }) };
}

/** Reads an SSE response body into its `data:` payloads (parsed JSON). */
export async function readSse(response: Response): Promise<Record<string, unknown>[]> {
  const text = await response.text();
  return text
    .split('\n\n')
    .map((chunk) =>
      chunk
        .split('\n')
        .filter((line) => line.startsWith('data: '))
        .map((line) => line.slice(6))
        .join('\n'),
    )
    .filter((data) => data !== '')
    .map((data) => JSON.parse(data) as Record<string, unknown>);
}

/** Parsed JSON of a response, loosely typed: tests assert its shape. */
// biome-ignore lint/suspicious/noExplicitAny: test responses are checked field by field
export type Json = any;
export const json = async (res: Response): Promise<Json> => res.json();
