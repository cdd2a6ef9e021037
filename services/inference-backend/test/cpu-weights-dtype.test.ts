// cpuWeightsDtype (STRATA_CPU_WEIGHTS_DTYPE) on the real engine: a bf16 copy of tinystories-656k
// keeps its bf16 values in the CPU backend's panels by default (the GEMM widens them exactly as
// it reads them) or widens them to fp32 at load; the two give the same tokens and logprobs, bit
// for bit, and name their weights so. A value other than auto or float32 is refused.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EncodedTensor, readSafetensorsHeader, writeSafetensors } from '../src/convert/safetensors.js';
import { Engine } from '../src/engine/engine.js';
import { modelPath, optionalModel } from './support/models.js';
import { copyTinystories, TempDirs } from './support/temp-model.js';
import { collect, tokensOf } from './support/token-streams.js';

const tiny = optionalModel('tinystories-656k');
const PROMPT = [1, 80, 147, 201, 282, 215, 286, 604, 10];

/** tinystories-656k's fp32 safetensors written again in BF16 (rounded to nearest even) into `dir`. */
async function writeBf16Copy(dir: string): Promise<void> {
  const source = path.join(modelPath('tinystories-656k'), 'model.safetensors');
  const header = await readSafetensorsHeader(source);
  const bytes = await readFile(source);
  const start = 8 + header.headerBytes;
  const tensors: EncodedTensor[] = header.tensors.map(({ name, entry }) => {
    expect(entry.dtype).toBe('F32');
    const [begin, end] = entry.data_offsets;
    const bits = new Uint32Array(
      bytes.buffer.slice(bytes.byteOffset + start + begin, bytes.byteOffset + start + end),
    );
    const out = new Uint16Array(bits.length);
    for (let i = 0; i < bits.length; i++) {
      const b = bits[i] ?? 0;
      out[i] = ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
    }
    return { name, shape: entry.shape, dtype: 'BF16', data: new Uint8Array(out.buffer) };
  });
  await writeSafetensors(path.join(dir, 'model.safetensors'), tensors, header.metadata);
}

describe.skipIf(!tiny.path)(`the CPU backend's bf16 weights${tiny.skipped}`, () => {
  const dirs = new TempDirs();
  let dir = '';
  beforeAll(async () => {
    dir = await copyTinystories(dirs);
    await writeBf16Copy(dir);
  });
  afterAll(() => dirs.removeAll());

  it('keeps them as they are or widens them at load, with the same tokens and logprobs', async () => {
    const kept = await Engine.load({ modelDir: dir, numBlocks: 256 });
    const widened = await Engine.load({ modelDir: dir, numBlocks: 256, cpuWeightsDtype: 'float32' });
    try {
      expect(kept.info.weights).toBe('bfloat16');
      expect(widened.info.weights).toBe('float32');
      const params = { temperature: 0, maxTokens: 40, ignoreEos: true, logprobs: 2 };
      const a = await collect(kept.generate(PROMPT, params));
      const b = await collect(widened.generate(PROMPT, params));
      expect(tokensOf(a)).toHaveLength(40);
      expect(tokensOf(a)).toEqual(tokensOf(b));
      expect(a.map((e) => e.logprob)).toEqual(b.map((e) => e.logprob));
    } finally {
      await Promise.all([kept.close(), widened.close()]);
    }
  });

  it('leaves an fp32 checkpoint as it is either way', async () => {
    const engine = await Engine.load({ modelDir: modelPath('tinystories-656k'), numBlocks: 64 });
    try {
      expect(engine.info.weights).toBe('float32');
    } finally {
      await engine.close();
    }
  });

  it('refuses a dtype it does not keep', async () => {
    await expect(
      Engine.load({ modelDir: dir, numBlocks: 64, cpuWeightsDtype: 'float16' as 'float32' }),
    ).rejects.toMatchObject({
      code: 'STRATA_INVALID_CONFIG',
      message: expect.stringContaining('cpuWeightsDtype must be auto or float32, got "float16"'),
    });
  });
});
