// A 4-bit AWQ checkpoint through the whole service: tinystories-656k quantized by the engine's
// own tool (make_int4_checkpoint: round to nearest, AutoAWQ's layout), loaded by the real engine
// (its linear weights read into Q4_1 blocks, engine.md "Models"), and served to the official
// `openai` client; a quantization_config the engine cannot run fails the load, naming the field.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';
import { mergeJson, TempDirs } from './support/temp-model.js';

const tiny = optionalModel('tinystories-656k');
const TOOL = path.join(import.meta.dirname, '../build/native/engine/model/make_int4_checkpoint');
const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

/** An AWQ (or GPTQ) copy of tinystories-656k, tokenizer files included. */
async function int4Copy(args: string[]): Promise<string> {
  const dir = path.join(await dirs.make(), 'model');
  const run = spawnSync(TOOL, [tiny.path as string, dir, ...args], { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`make_int4_checkpoint failed: ${run.stderr}`);
  return dir;
}

describe.skipIf(!tiny.path)(`a 4-bit AWQ checkpoint served${tiny.skipped}`, () => {
  let awq = '';
  beforeAll(async () => {
    expect(existsSync(TOOL), `${TOOL} is built with the addon (pnpm build)`).toBe(true);
    awq = await int4Copy(['--method', 'awq', '--group', '128']);
  });

  it('loads as Q4_1 blocks, names its quantization, and completes the same text twice', async () => {
    const backend = await startBackend({ STRATA_MODEL_DIR: awq, STRATA_WARMUP: 'false' });
    const client = new OpenAI({ baseURL: `${backend.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    try {
      const info = backend.host.get().engine.info;
      expect(info.weights).toBe('awq int4, groups of 128: Q4_1');
      expect(info.kvCacheDtype).toBe('float16');
      const models = await client.models.list();
      expect(models.data[0]).toMatchObject({ id: 'model', quantization: 'awq int4, groups of 128' });
      const complete = () =>
        client.completions.create({
          model: 'model',
          prompt: 'Once upon a time',
          max_tokens: 24,
          temperature: 0,
        });
      const first = await complete();
      const again = await complete();
      expect(first.choices[0]?.text.length).toBeGreaterThan(0);
      expect(first.usage?.completion_tokens).toBeGreaterThan(0);
      expect(again.choices[0]?.text).toBe(first.choices[0]?.text);
    } finally {
      await backend.close();
    }
  });

  it('fails the load on a quantization_config the engine cannot run, naming the field', async () => {
    const dir = await int4Copy(['--method', 'gptq', '--group', '64', '--sym']);
    await mergeJson(dir, 'config.json', {
      quantization_config: { quant_method: 'gptq', bits: 8, group_size: 64 },
    });
    const backend = await startBackend({ STRATA_MODEL_DIR: dir, STRATA_WARMUP: 'false' });
    try {
      expect(backend.host.state).toBe('failed');
      const ready = await fetch(`${backend.url}/health/ready`);
      expect(ready.status).toBe(503);
      expect(await ready.text()).toMatch(/quantization_config\.bits.*must be 4/);
    } finally {
      await backend.close();
    }
  });
});
