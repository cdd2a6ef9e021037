// The model's load time, weight bytes and GB/s: in the 'model loaded' log line and as the
// strata_backend_model_load_* gauges. A real backend with the real engine on tinystories-656k
// (safetensors) and on its GGUF file.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { modelPath, optionalModel } from './support/models.js';
import {
  MODEL_LABELS,
  type ObservedBackend,
  sample,
  startObservedBackend,
} from './support/observed-backend.js';

const tiny = optionalModel('tinystories-656k');
const tinyGguf = optionalModel('tinystories-656k-gguf');
const LOAD_SERIES = [
  'strata_backend_model_load_seconds',
  'strata_backend_model_load_bytes',
  'strata_backend_model_load_gb_per_second',
];

let backend: ObservedBackend | undefined;
afterEach(async () => {
  await backend?.close();
  backend = undefined;
});

describe.skipIf(!tiny.path)(`model load time and throughput${tiny.skipped}`, () => {
  it('reads 0 before the load, then the engine load seconds, the safetensors bytes and their GB/s', async () => {
    backend = await startObservedBackend();
    const before = await backend.scrape();
    for (const name of LOAD_SERIES) expect(sample(before, name, MODEL_LABELS), name).toBe(0);

    await backend.start();
    const loaded = backend.logs.find((l) => l.msg === 'model loaded') as Record<string, number>;
    const weights = statSync(join(modelPath('tinystories-656k'), 'model.safetensors')).size;
    const engineSeconds = backend.host.loaded?.engine.info.loadSeconds ?? 0;
    expect(engineSeconds).toBeGreaterThan(0);
    expect(loaded.load_bytes).toBe(weights);
    expect(loaded.engine_load_seconds).toBe(engineSeconds);
    expect(loaded.load_gb_per_s).toBeCloseTo(weights / 1e9 / engineSeconds, 9);
    // The whole load (tokenizer and chat template included) takes at least the engine's part.
    expect(loaded.load_seconds).toBeGreaterThanOrEqual(engineSeconds);
    expect(loaded.device_load_gb_per_s).toBe(backend.host.loaded?.engine.info.loadGBPerSecond);
    // fp32 safetensors: the KV cache stays fp32 (auto), and the log line says so.
    expect((loaded as unknown as Record<string, string>).kv_cache_dtype).toBe('float32');
    // decode_kernels is the CUDA backend's (which kernels a decode step runs): none on the CPU.
    expect(loaded).not.toHaveProperty('decode_kernels');

    const after = await backend.scrape();
    expect(sample(after, 'strata_backend_model_load_seconds', MODEL_LABELS)).toBe(engineSeconds);
    expect(sample(after, 'strata_backend_model_load_bytes', MODEL_LABELS)).toBe(weights);
    expect(sample(after, 'strata_backend_model_load_gb_per_second', MODEL_LABELS)).toBeCloseTo(
      weights / 1e9 / engineSeconds,
      9,
    );
  }, 120_000);
});

describe.skipIf(!tinyGguf.path)(`model load of a GGUF file${tinyGguf.skipped}`, () => {
  it('counts the GGUF file as the weight bytes', async () => {
    const file = join(modelPath('tinystories-656k-gguf'), 'tinystories-656k-f32.gguf');
    backend = await startObservedBackend({ STRATA_MODEL_DIR: file });
    await backend.start();
    const labels = { model_name: 'tinystories-656k-f32' };
    const samples = await backend.scrape();
    expect(sample(samples, 'strata_backend_model_load_bytes', labels)).toBe(statSync(file).size);
    expect(sample(samples, 'strata_backend_model_load_gb_per_second', labels)).toBeGreaterThan(0);
  }, 120_000);
});
