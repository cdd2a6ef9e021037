// GET /status: what the sidecar knows and how fresh it is, for people and for probes that want
// more than /health/ready (which never fails on a source: see sidecar.ts).
import type { FastifyPluginAsync } from 'fastify';
import type { Sidecar } from '../sidecar.js';

const ageSeconds = (atMs: number | undefined) => (atMs === undefined ? null : (Date.now() - atMs) / 1000);

const statusSchema = {
  type: 'object',
  required: ['gpu', 'backend', 'saturation'],
  properties: {
    gpu: {
      type: 'object',
      required: ['mode', 'source', 'up', 'gpus', 'age_seconds', 'error', 'dcgm', 'devices'],
      properties: {
        mode: { type: 'string' },
        source: { type: 'string' },
        up: { type: 'boolean' },
        gpus: { type: 'integer' },
        age_seconds: { type: ['number', 'null'] },
        error: { type: ['string', 'null'] },
        dcgm: {
          type: ['object', 'null'],
          required: ['url', 'age_seconds', 'error'],
          properties: {
            url: { type: 'string' },
            age_seconds: { type: ['number', 'null'] },
            error: { type: ['string', 'null'] },
          },
        },
        devices: { type: 'array', items: { type: 'object', additionalProperties: true } },
      },
    },
    backend: {
      type: 'object',
      required: ['up', 'age_seconds', 'error', 'load'],
      properties: {
        up: { type: 'boolean' },
        age_seconds: { type: ['number', 'null'] },
        error: { type: ['string', 'null'] },
        load: { type: ['object', 'null'], additionalProperties: true },
      },
    },
    saturation: {
      type: 'object',
      required: ['state', 'inputs'],
      properties: {
        state: { type: ['string', 'null'] },
        inputs: { type: ['object', 'null'], additionalProperties: true },
      },
    },
  },
} as const;

export const statusRoutes: FastifyPluginAsync<{ sidecar: Sidecar }> = async (app, { sidecar }) => {
  app.get('/status', { schema: { response: { 200: statusSchema } }, logLevel: 'warn' }, async () => ({
    gpu: {
      mode: sidecar.gpu.mode,
      source: sidecar.gpu.source,
      up: sidecar.gpu.up,
      gpus: sidecar.gpu.gpus.length,
      age_seconds: ageSeconds(sidecar.gpu.lastSuccessMs),
      error: sidecar.gpu.lastError ?? null,
      dcgm: sidecar.gpu.dcgm
        ? {
            url: sidecar.gpu.dcgm.url,
            age_seconds: ageSeconds(sidecar.gpu.dcgm.lastSuccessMs),
            error: sidecar.gpu.dcgm.lastError ?? null,
          }
        : null,
      // The last sample per GPU (absent fields: the source cannot report them).
      devices: sidecar.gpu.gpus,
    },
    backend: {
      up: sidecar.backend.up,
      age_seconds: ageSeconds(sidecar.backend.last?.takenAtMs),
      error: sidecar.backend.lastError ?? null,
      load: sidecar.backend.last?.load ?? null,
    },
    saturation: { state: sidecar.diagnoser.state ?? null, inputs: sidecar.diagnoser.inputs ?? null },
  }));
};
