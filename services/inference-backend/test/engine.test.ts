// The engine through the N-API boundary, on the real tinystories-656k weights.
import { getEventListeners } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, EngineError, type GeneratedToken, type SamplingParams } from '../src/engine/engine.js';
import { loadNativeAddon } from '../src/native.js';
import { modelPath, optionalModel } from './support/models.js';
import { collect, tokensOf } from './support/token-streams.js';

const tiny = optionalModel('tinystories-656k');

const PROMPT = [1, 80, 147, 201, 282, 215, 286, 604, 10]; // <|start_story|>Once upon a time, there was a dog.

// Deterministic prompts of mixed lengths built from the model's own vocabulary range.
function prompts(count: number): number[][] {
  return Array.from({ length: count }, (_, i) => [
    1,
    ...Array.from({ length: 3 + ((i * 37) % 90) }, (_, k) => 3 + ((i * 131 + k * 17) % 2000)),
  ]);
}

async function waitIdle(engine: Engine): Promise<void> {
  for (let i = 0; i < 200 && (engine.stats().numRunning > 0 || engine.stats().numWaiting > 0); i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe.skipIf(!tiny.path)(`engine${tiny.skipped}`, () => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await Engine.load({ modelDir: modelPath('tinystories-656k'), numBlocks: 512 });
  });
  afterAll(async () => {
    await engine.close();
  });

  it('reports the model and pool it loaded', () => {
    expect(engine.info.model).toMatchObject({
      architecture: 'LlamaForCausalLM',
      vocabSize: 2048,
      numLayers: 2,
      numKvHeads: 4,
    });
    expect(engine.info.engine).toMatchObject({ numBlocks: 512, blockSize: 16, maxModelLen: 512 });
    expect(engine.info.sampling).toBe('cpu');
  });

  it('streams greedy tokens and ends with a finish reason', async () => {
    const events = await collect(engine.generate(PROMPT, { temperature: 0, maxTokens: 40, ignoreEos: true }));
    expect(events).toHaveLength(40);
    expect(events.slice(0, -1).every((e) => e.finishReason === undefined)).toBe(true);
    expect(events.at(-1)?.finishReason).toBe('length');
    const again = await collect(engine.generate(PROMPT, { temperature: 0, maxTokens: 40, ignoreEos: true }));
    expect(tokensOf(again)).toEqual(tokensOf(events));
  });

  it('reproduces a seeded sample and returns top logprobs that are sorted log-probabilities', async () => {
    const params: SamplingParams = {
      temperature: 0.9,
      topP: 0.95,
      seed: 1234,
      maxTokens: 25,
      ignoreEos: true,
      logprobs: 3,
    };
    const a = await collect(engine.generate(PROMPT, params));
    const b = await collect(engine.generate(PROMPT, params));
    expect(tokensOf(a)).toEqual(tokensOf(b));
    for (const e of a) {
      expect(e.logprob).toBeLessThanOrEqual(0);
      expect(e.topLogprobs).toHaveLength(3);
      const values = (e.topLogprobs ?? []).map((t) => t.logprob);
      expect([...values].sort((x, y) => y - x)).toEqual(values);
    }
  });

  it('rejects bad input at submit with a stable code', () => {
    const codeOf = (fn: () => unknown) => {
      try {
        fn();
      } catch (err) {
        expect(err).toBeInstanceOf(EngineError);
        return [(err as EngineError).code, (err as EngineError).message];
      }
      return ['none', ''];
    };
    expect(codeOf(() => engine.generate(PROMPT, { topP: 1.5 }))).toEqual([
      'STRATA_INVALID_PARAM',
      'top_p must be in (0, 1], got 1.5',
    ]);
    const [code, message] = codeOf(() => engine.generate(new Array(600).fill(5), { maxTokens: 1 }));
    expect(code).toBe('STRATA_PROMPT_TOO_LONG');
    expect(message).toContain('512');
    expect(codeOf(() => engine.generate([1, 99999], { maxTokens: 1 }))[0]).toBe('STRATA_INVALID_PARAM');
    expect(codeOf(() => engine.generate([], { maxTokens: 1 }))[0]).toBe('STRATA_INVALID_PARAM');
  });

  it('aborts through an AbortSignal and frees the blocks', async () => {
    const controller = new AbortController();
    const events: GeneratedToken[] = [];
    for await (const e of engine.generate(
      PROMPT,
      { temperature: 0, maxTokens: 400, ignoreEos: true },
      { signal: controller.signal },
    )) {
      events.push(e);
      if (events.length === 5) controller.abort();
    }
    expect(events.at(-1)?.finishReason).toBe('abort');
    expect(events.length).toBeLessThan(400);
    await waitIdle(engine);
    expect(engine.stats().kvBlocksUsed).toBe(0);
  });

  it('detaches its AbortSignal listener once a request finishes', async () => {
    const controller = new AbortController();
    for (let i = 0; i < 20; i++) {
      await collect(engine.generate(PROMPT, { temperature: 0, maxTokens: 2 }, { signal: controller.signal }));
    }
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });

  it('cancels a request whose consumer stops reading', async () => {
    let seen = 0;
    for await (const _ of engine.generate(PROMPT, { temperature: 0, maxTokens: 400, ignoreEos: true })) {
      if (++seen === 3) break;
    }
    await waitIdle(engine);
    expect(engine.liveRequests).toBe(0);
    expect(engine.stats().kvBlocksUsed).toBe(0);
  });

  it('reuses cached prefixes within a tenant and never across tenants', async () => {
    const prompt = [1, ...Array.from({ length: 70 }, (_, k) => 10 + k)];
    const params = { temperature: 0, maxTokens: 8, ignoreEos: true };
    const hits = () => engine.stats().prefixCacheHits;
    const first = tokensOf(await collect(engine.generate(prompt, params, { tenant: 'acme' })));
    const before = hits();
    const second = tokensOf(await collect(engine.generate(prompt, params, { tenant: 'acme' })));
    expect(hits() - before).toBe(64); // four full 16-token blocks of the 71-token prompt
    expect(second).toEqual(first);
    const beforeOther = hits();
    const other = tokensOf(await collect(engine.generate(prompt, params, { tenant: 'globex' })));
    expect(hits()).toBe(beforeOther);
    expect(other).toEqual(first);
  });
});

describe('engine under pressure', () => {
  it.skipIf(!tiny.path)(
    `gives each request the same greedy output alone and among 32 with chunked prefill and preemption${tiny.skipped}`,
    async () => {
      const inputs = prompts(32);
      const params = { temperature: 0, maxTokens: 48, ignoreEos: true };
      const roomy = await Engine.load({ modelDir: modelPath('tinystories-656k'), numBlocks: 512 });
      const alone: number[][] = [];
      for (const p of inputs) alone.push(tokensOf(await collect(roomy.generate(p, params))));
      await roomy.close();
      // 40 blocks (640 tokens) cannot hold 32 sequences of up to 140 tokens: preemption must happen.
      const tight = await Engine.load({
        modelDir: modelPath('tinystories-656k'),
        numBlocks: 40,
        maxNumBatchedTokens: 64,
        maxModelLen: 512,
      });
      const together = await Promise.all(
        inputs.map((p) => collect(tight.generate(p, params)).then(tokensOf)),
      );
      const stats = tight.stats();
      await tight.close();
      expect(stats.numPreemptions).toBeGreaterThan(0);
      expect(together).toEqual(alone);
      expect(stats.kvBlocksUsed).toBe(0);
    },
  );

  it.skipIf(!tiny.path)(
    `finishes 1,200 random requests with random aborts exactly once each, leaking no blocks${tiny.skipped}`,
    async () => {
      const engine = await Engine.load({
        modelDir: modelPath('tinystories-656k'),
        numBlocks: 96,
        maxNumBatchedTokens: 128,
      });
      let seed = 42;
      const rand = () => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed / 2 ** 31;
      };
      const finishes = new Map<number, number>();
      const runs: Promise<void>[] = [];
      for (let i = 0; i < 1200; i++) {
        const prompt = [
          1,
          ...Array.from({ length: 1 + Math.floor(rand() * 60) }, () => 3 + Math.floor(rand() * 2000)),
        ];
        const params: SamplingParams = {
          temperature: rand() < 0.3 ? 0 : rand() * 1.5,
          topK: rand() < 0.5 ? 0 : 1 + Math.floor(rand() * 50),
          topP: 0.5 + rand() * 0.5,
          minP: rand() * 0.2,
          repetitionPenalty: 1 + rand() * 0.3,
          maxTokens: 1 + Math.floor(rand() * 24),
          seed: i,
        };
        const controller = new AbortController();
        if (rand() < 0.25) setTimeout(() => controller.abort(), Math.floor(rand() * 30));
        runs.push(
          collect(engine.generate(prompt, params, { signal: controller.signal })).then((events) => {
            const finals = events.filter((e) => e.finishReason !== undefined);
            finishes.set(i, finals.length);
            expect(events.at(-1)?.finishReason).toBeDefined();
          }),
        );
        if (i % 100 === 99) await new Promise((r) => setTimeout(r, 5));
      }
      await Promise.all(runs);
      await waitIdle(engine);
      const stats = engine.stats();
      await engine.close();
      expect(finishes.size).toBe(1200);
      expect([...finishes.values()].every((n) => n === 1)).toBe(true);
      expect(stats.finishedStop + stats.finishedLength + stats.finishedAbort).toBe(1200);
      expect(stats.finishedAbort).toBeGreaterThan(0);
      expect(stats.kvBlocksUsed).toBe(0);
      expect(stats.kvBlocksFree + stats.kvBlocksCached).toBe(stats.kvBlocksTotal);
    },
  );

  it.skipIf(!tiny.path)(
    `runs the cuda backend where the build and the machine have CUDA, and says why not elsewhere${tiny.skipped}`,
    async () => {
      const addon = loadNativeAddon();
      const load = Engine.load({
        modelDir: modelPath('tinystories-656k'),
        backend: 'cuda',
        dtype: 'float32',
      });
      if (!addon.buildInfo().cuda) {
        await expect(load).rejects.toMatchObject({
          code: 'STRATA_INVALID_CONFIG',
          message: expect.stringContaining('backend "cuda" is not in this build'),
        });
      } else if (!addon.cudaInfo().available) {
        await expect(load).rejects.toMatchObject({
          code: 'STRATA_CUDA_ERROR',
          message: expect.stringMatching(/^no CUDA device: \S/),
        });
      } else {
        // A GPU: fp32 on the device gives the CPU backend's greedy tokens.
        const gpu = await load;
        const cpu = await Engine.load({ modelDir: modelPath('tinystories-656k'), numBlocks: 512 });
        try {
          expect(gpu.info).toMatchObject({
            backend: 'cuda',
            dtype: 'float32',
            kernelIsa: 'cuda',
            sampling: 'gpu',
          });
          const greedy = { temperature: 0, maxTokens: 40, ignoreEos: true };
          expect(tokensOf(await collect(gpu.generate(PROMPT, greedy)))).toEqual(
            tokensOf(await collect(cpu.generate(PROMPT, greedy))),
          );
          // Seeded sampling on the GPU draws what the CPU sampler draws from the same logits.
          const sampled = { temperature: 0.8, topK: 40, topP: 0.9, seed: 7, maxTokens: 40, ignoreEos: true };
          expect(tokensOf(await collect(gpu.generate(PROMPT, sampled)))).toEqual(
            tokensOf(await collect(cpu.generate(PROMPT, sampled))),
          );
        } finally {
          await Promise.all([gpu.close(), cpu.close()]);
        }
      }
    },
  );

  it.skipIf(!tiny.path)(`rejects a backend name it does not know${tiny.skipped}`, async () => {
    await expect(
      Engine.load({ modelDir: modelPath('tinystories-656k'), backend: 'tpu' as 'cpu' }),
    ).rejects.toMatchObject({
      code: 'STRATA_INVALID_CONFIG',
      message: expect.stringContaining('backend must be "cpu" or "cuda"'),
    });
  });

  it('fails loading a model directory that does not exist with a code', async () => {
    await expect(Engine.load({ modelDir: '/nonexistent/model' })).rejects.toMatchObject({
      name: 'EngineError',
      code: 'STRATA_MODEL_CONFIG',
    });
  });
});
