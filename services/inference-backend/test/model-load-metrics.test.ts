// The model's load time, weight bytes and GB/s: in the 'model loaded' log line and as the
// strata_backend_model_load_* gauges. A real backend with the real engine on tinystories-656k
// (safetensors) and on its GGUF file.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readSafetensorsHeader } from '../src/convert/safetensors.js';
import { Engine } from '../src/engine/engine.js';
import { readGguf } from '../src/model/gguf.js';
import { ggufFileOf } from '../src/model/model-files.js';
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
    // The whole load (tokenizer and chat template included) takes at least the engine's part,
    // and the grammar engine's reading of the vocabulary, which comes after it.
    expect(loaded.load_seconds).toBeGreaterThanOrEqual(engineSeconds);
    const grammarSeconds = loaded.structured_output_load_seconds ?? 0;
    expect(grammarSeconds).toBeGreaterThan(0);
    expect(loaded.load_seconds).toBeGreaterThanOrEqual(engineSeconds + grammarSeconds);
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

/** The tensor bytes of a safetensors file, from its header (what the native load counts). */
async function safetensorsTensorBytes(file: string): Promise<number> {
  const { tensors } = await readSafetensorsHeader(file);
  return tensors.reduce((n, { entry }) => n + entry.data_offsets[1] - entry.data_offsets[0], 0);
}

describe.skipIf(!tiny.path || !tinyGguf.path)(`model load progress${tiny.skipped}${tinyGguf.skipped}`, () => {
  it('counts the checkpoint bytes in the array the load writes: all of them once loaded', async () => {
    const weights = join(modelPath('tinystories-656k'), 'model.safetensors');
    const ggufPath = (await ggufFileOf(modelPath('tinystories-656k-gguf'))) as string;
    const gguf = await readGguf(ggufPath);
    const cases: [string, number][] = [
      [modelPath('tinystories-656k'), await safetensorsTensorBytes(weights)],
      [ggufPath, gguf.tensors.reduce((n, t) => n + t.bytes, 0)],
    ];
    for (const [modelDir, bytes] of cases) {
      const progress = new BigInt64Array(2).fill(-1n);
      const engine = await Engine.load({ modelDir, threads: 1, numBlocks: 64, maxModelLen: 256, progress });
      try {
        expect(bytes).toBeGreaterThan(0);
        expect([...progress].map(Number), modelDir).toEqual([bytes, bytes]);
      } finally {
        await engine.close();
      }
    }
    await expect(
      Engine.load({ modelDir: modelPath('tinystories-656k'), progress: new BigInt64Array(1) }),
    ).rejects.toMatchObject({
      code: 'STRATA_INVALID_CONFIG',
      message: /progress must be a BigInt64Array of 2/,
    });
  }, 60_000);

  it("logs the load's progress every STRATA_LOAD_PROGRESS_MS while it runs, and none after", async () => {
    // A KV pool of 8,192 blocks (128 MB, zeroed during the load) keeps the load running for many
    // 1 ms periods on any machine.
    backend = await startObservedBackend({ STRATA_LOAD_PROGRESS_MS: '1', STRATA_KV_CACHE_BLOCKS: '8192' });
    await backend.start();
    const lines = backend.logs;
    const loaded = lines.findIndex((l) => l.msg === 'model loaded');
    const progress = lines.filter((l) => l.msg === 'model load progress');
    expect(progress.length).toBeGreaterThan(0);
    expect(lines.findLastIndex((l) => l.msg === 'model load progress')).toBeLessThan(loaded);
    const weights = await safetensorsTensorBytes(join(modelPath('tinystories-656k'), 'model.safetensors'));
    for (const line of progress) {
      expect(line).toMatchObject({ model: modelPath('tinystories-656k') });
      expect(line.bytes_total === 0 || line.bytes_total === weights).toBe(true);
      expect(line.bytes_done as number).toBeLessThanOrEqual(weights);
      expect(line.percent as number).toBeGreaterThanOrEqual(0);
      expect(line.percent as number).toBeLessThanOrEqual(100);
      expect(line.seconds as number).toBeGreaterThan(0);
    }
    // The weights are read before the pool is zeroed: the last lines say all of them.
    expect(progress.at(-1)).toMatchObject({ bytes_done: weights, bytes_total: weights, percent: 100 });
  }, 120_000);
});
