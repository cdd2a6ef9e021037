// The backend's Swagger UI at /docs, on the real app with the real native addon, listening on
// port 0. No model is loaded: the docs and the document do not need one.
import type { AddressInfo } from 'node:net';
import { createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import {
  INFERENCE_OPERATIONS,
  loadDocs,
  operationIdProblems,
  operationTable,
  swaggerUiProblems,
} from '@strata/common/testing';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { configEnv, configSchema } from '../src/config.js';
import { ModelHost } from '../src/inference/model-host.js';
import { loadNativeAddon } from '../src/native.js';

let app: FastifyInstance;
let url: string;

beforeAll(async () => {
  const config = loadConfig({ schema: configSchema, envMap: configEnv, env: {} });
  const logger = createLogger({ service: 'inference-backend', level: 'silent' });
  const readiness = new Readiness();
  const host = new ModelHost(config, readiness, logger);
  app = buildApp(
    { config, logger, metrics: createMetrics('inference-backend', { defaultMetrics: false }), readiness },
    { addon: loadNativeAddon(), host },
  );
  await app.listen({ host: '127.0.0.1', port: 0 });
  url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await app?.close();
});

describe('backend /docs', () => {
  it('serves Swagger UI from the package assets, reading the backend /openapi.json', async () => {
    const docs = await loadDocs(`${url}/docs`);
    expect(swaggerUiProblems(docs, url, 'Strata inference backend')).toEqual([]);
    expect(docs.document).toEqual(await (await fetch(`${url}/openapi.json`)).json());
    const doc = docs.document as { info: unknown; paths: Record<string, unknown> };
    expect(doc.info).toEqual({ title: 'Strata inference backend', version: '0.1.0' });
    // The docs' own routes stay out of the document; every operation is named once, the
    // inference ones as OpenAI names them, for client generators.
    expect(Object.keys(doc.paths)).toHaveLength(5);
    expect(operationIdProblems(doc)).toEqual([]);
    expect(operationTable(doc)).toEqual(['GET /load getLoad', ...INFERENCE_OPERATIONS]);
  });
});
