import { loadConfig } from '@strata/common';
import { describe, expect, it } from 'vitest';
import { configEnv, configSchema } from '../src/config.js';
import { loadNativeAddon } from '../src/native.js';
import { json, startBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');

describe('inference-backend app', () => {
  it('listens on 8000 by default, like vLLM, and reads engine settings from the environment', () => {
    expect(loadConfig({ schema: configSchema, envMap: configEnv, env: {} }).port).toBe(8000);
    const config = loadConfig({
      schema: configSchema,
      envMap: configEnv,
      env: { PORT: '8123', STRATA_MAX_NUM_SEQS: '8' },
    });
    expect(config.port).toBe(8123);
    expect(config.engine).toMatchObject({ maxNumSeqs: 8, blockSize: 16, maxNumBatchedTokens: 2048 });
    expect(config.limits).toMatchObject({ maxQueued: 256, defaultMaxTokens: 16 });
  });

  it.skipIf(!tiny.path)(
    `is live at once and ready only after the model loaded and warmed up${tiny.skipped}`,
    async () => {
      const backend = await startBackend({}, { waitReady: false });
      try {
        expect((await fetch(`${backend.url}/health/live`)).status).toBe(200);
        const early = await fetch(`${backend.url}/health/ready`);
        expect(early.status).toBe(503);
        expect((await json(early)).checks.warmup_done.ok).toBe(false);
        for (let i = 0; i < 200 && (await fetch(`${backend.url}/health/ready`)).status !== 200; i++) {
          await new Promise((r) => setTimeout(r, 50));
        }
        const ready = await json(await fetch(`${backend.url}/health/ready`));
        expect(ready).toMatchObject({
          ready: true,
          checks: { model_loaded: { ok: true, detail: 'tinystories-656k' }, warmup_done: { ok: true } },
        });
        expect(ready.checks.warmup_done.detail).toMatch(/^\d+ requests in [\d.]+ s$/);
      } finally {
        await backend.close();
      }
    },
  );

  it.skipIf(!tiny.path)(
    `warms up within its own admission limit: a backend admitting 3 requests still turns ready${tiny.skipped}`,
    async () => {
      const backend = await startBackend(
        { STRATA_MAX_NUM_SEQS: '2', STRATA_MAX_QUEUED: '1' },
        { waitReady: false },
      );
      try {
        for (let i = 0; i < 300 && (await fetch(`${backend.url}/health/ready`)).status !== 200; i++) {
          await new Promise((r) => setTimeout(r, 50));
        }
        const ready = await json(await fetch(`${backend.url}/health/ready`));
        expect(ready).toMatchObject({ ready: true, checks: { warmup_done: { ok: true } } });
        // 3 prompt lengths alone, then batches of 3 (capped from 4 and from 16, once).
        expect(ready.checks.warmup_done.detail).toMatch(/^6 requests in [\d.]+ s$/);
      } finally {
        await backend.close();
      }
    },
  );

  it('stays live but not ready without a model, and says why', async () => {
    const backend = await startBackend({ STRATA_MODEL_DIR: '' });
    try {
      const ready = await fetch(`${backend.url}/health/ready`);
      expect(ready.status).toBe(503);
      expect((await json(ready)).checks.model_loaded).toEqual({
        ok: false,
        detail: 'no model configured: set STRATA_MODEL_DIR',
      });
      const generate = await fetch(`${backend.url}/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'hi' }),
      });
      expect(generate.status).toBe(503);
      expect((await json(generate)).error.code).toBe('STRATA_NOT_READY');
    } finally {
      await backend.close();
    }
  });

  it('exports the CUDA device count the addon sees', async () => {
    const backend = await startBackend({ STRATA_MODEL_DIR: '' });
    try {
      const devices = loadNativeAddon().cudaInfo().devices.length;
      const cuda = String(loadNativeAddon().buildInfo().cuda);
      expect(await (await fetch(`${backend.url}/metrics`)).text()).toContain(
        `strata_backend_cuda_devices{cuda_compiled="${cuda}",service="inference-backend"} ${devices}`,
      );
    } finally {
      await backend.close();
    }
  });
});
