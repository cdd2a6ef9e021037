// cpuWeightsDtype (STRATA_CPU_WEIGHTS_DTYPE) on the real engine: a bf16 copy of tinystories-656k
// keeps its bf16 values in the CPU backend's panels by default (the GEMM widens them exactly as
// it reads them) or widens them to fp32 at load; the two give the same tokens and logprobs, bit
// for bit, and name their weights so. A value other than auto or float32 is refused. cpuKernels
// picks the kernel set: avx2 gives auto's bits, portable (no fused multiply-add) its tokens;
// amx, on a CPU with AMX, multiplies the bf16 matrices in tiles with bf16 activations (close
// to, not the same as, the exact sets), and elsewhere runs auto.
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EncodedTensor, readSafetensorsHeader, writeSafetensors } from '../src/convert/safetensors.js';
import { Engine } from '../src/engine/engine.js';
import { modelPath, optionalModel } from './support/models.js';
import { copyTinystories, TempDirs } from './support/temp-model.js';
import { collect, tokensOf } from './support/token-streams.js';

const tiny = optionalModel('tinystories-656k');

/** Whether this CPU has AMX's bf16 tile multiplies (Linux names them in /proc/cpuinfo). */
function cpuHasAmx(): boolean {
  try {
    const flags =
      readFileSync('/proc/cpuinfo', 'utf8')
        .match(/^flags\s*:(.*)$/m)?.[1]
        ?.split(/\s+/) ?? [];
    return flags.includes('amx_bf16') && flags.includes('amx_tile');
  } catch {
    return false;
  }
}
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

  it("runs the kernel set cpuKernels names: avx2 gives the auto set's bits, portable its tokens", async () => {
    const params = { temperature: 0, maxTokens: 24, ignoreEos: true, logprobs: 2 };
    const auto = await Engine.load({ modelDir: dir, numBlocks: 64 });
    try {
      const reference = await collect(auto.generate(PROMPT, params));
      for (const cpuKernels of ['avx2', 'portable'] as const) {
        const engine = await Engine.load({ modelDir: dir, numBlocks: 64, cpuKernels });
        try {
          // avx2 names the AVX2 set where the CPU runs it (every x86-64 CPU these tests run on).
          expect(engine.info.kernelIsa.split(',')[0]).toBe(cpuKernels === 'avx2' ? 'avx2+fma' : 'portable');
          const got = await collect(engine.generate(PROMPT, params));
          expect(tokensOf(got)).toEqual(tokensOf(reference));
          if (cpuKernels === 'avx2') {
            expect(got.map((e) => e.logprob)).toEqual(reference.map((e) => e.logprob));
          } else {
            // The portable build multiplies and adds in two roundings where the x86 ones fuse them.
            const drift = got.map((e, i) => Math.abs((e.logprob ?? 0) - (reference[i]?.logprob ?? 0)));
            expect(Math.max(...drift)).toBeLessThan(1e-4);
          }
        } finally {
          await engine.close();
        }
      }
    } finally {
      await auto.close();
    }
  });

  it('multiplies the bf16 matrices in AMX tiles under cpuKernels amx where the CPU has AMX, else runs auto', async () => {
    const params = { temperature: 0, maxTokens: 40, ignoreEos: true, logprobs: 2 };
    const auto = await Engine.load({ modelDir: dir, numBlocks: 256 });
    const amx = await Engine.load({ modelDir: dir, numBlocks: 256, cpuKernels: 'amx' });
    try {
      const exact = await collect(auto.generate(PROMPT, params));
      const tiled = await collect(amx.generate(PROMPT, params));
      if (!cpuHasAmx()) {
        expect(amx.info.kernelIsa).toBe(auto.info.kernelIsa);
        expect(tiled.map((e) => e.logprob)).toEqual(exact.map((e) => e.logprob));
        return;
      }
      expect(amx.info.kernelIsa.split(',')[0]).toBe('amx-bf16');
      // bf16 activations: the logprobs move (they are not the exact sets' bits), a little.
      const moved = exact.map((e, i) => Math.abs((tiled[i]?.logprob ?? 0) - (e.logprob ?? 0)));
      expect(Math.max(...moved)).toBeGreaterThan(0);
      // Measured on a Xeon with AMX: all 40 tokens the same, logprobs within 0.025 nats.
      expect(tokensOf(tiled).slice(0, 24)).toEqual(tokensOf(exact).slice(0, 24));
      expect(Math.max(...moved.slice(0, 24))).toBeLessThan(0.1);
    } finally {
      await Promise.all([auto.close(), amx.close()]);
    }
  });

  it('refuses a dtype or a kernel set it does not know', async () => {
    await expect(
      Engine.load({ modelDir: dir, numBlocks: 64, cpuWeightsDtype: 'float16' as 'float32' }),
    ).rejects.toMatchObject({
      code: 'STRATA_INVALID_CONFIG',
      message: expect.stringContaining('cpuWeightsDtype must be auto or float32, got "float16"'),
    });
    await expect(
      Engine.load({ modelDir: dir, numBlocks: 64, cpuKernels: 'avx512' as 'amx' }),
    ).rejects.toMatchObject({
      code: 'STRATA_INVALID_CONFIG',
      message: expect.stringContaining('cpuKernels must be auto, amx, avx2 or portable, got "avx512"'),
    });
  });
});
