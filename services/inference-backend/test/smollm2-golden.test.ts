// The default model against llama.cpp on the same file (test/golden/smollm2-q4_1-llamacpp.json,
// made by tools/make_golden_llamacpp.mjs): the chat template renders the same text, the
// tokenizer gives llama.cpp's prompt ids, and the engine's greedy tokens follow llama.cpp's,
// 5 chat prompts and 2 raw prompts of up to 48 tokens each, alone and all in one batch.
//
// Where they part: both quantize activations to int8 per 32 values, so a last-bit difference
// (the quantized GEMM sums each block's integer products whole where ggml keeps 8 partial lanes;
// attention sums, exp, rope angles) can move one int8 step and flip a close call. So a prompt
// either matches in full, or matches up to a first difference where llama.cpp's token is in the
// engine's top 3 within NEAR_TIE nats of its choice; and at least FULL_MATCHES of the seven
// match in full (3 do; the other four part at close calls: see docs/engine.md). The reference
// ran llama.cpp with an F32 KV cache, so the engine here does too (kvCacheDtype float32); with
// its default f16 cache for this model (llama.cpp's own default) the same rule holds.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { type ChatMessage, ChatTemplate } from '../src/model/chat-template.js';
import { loadModelFiles } from '../src/model/model-files.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { smollm2Gguf } from './support/models.js';

interface GoldenCase {
  kind: 'chat' | 'raw';
  messages?: ChatMessage[];
  text: string;
  prompt_ids: number[];
  output_ids: number[];
  stopped_at_eog: boolean;
}
const golden = JSON.parse(
  readFileSync(join(import.meta.dirname, 'golden', 'smollm2-q4_1-llamacpp.json'), 'utf8'),
) as { cases: GoldenCase[] };
const smol = smollm2Gguf();

describe.skipIf(!smol.path)(`SmolLM2 Q4_1 greedy tokens follow llama.cpp's${smol.skipped}`, () => {
  let engine: Engine;
  let tokenizer: Tokenizer;
  let template: ChatTemplate;

  beforeAll(async () => {
    const file = smol.path as string;
    const files = await loadModelFiles(file);
    tokenizer = Tokenizer.fromModelFiles(files);
    template = ChatTemplate.fromModelFiles(files);
    engine = await Engine.load({
      modelDir: file,
      numBlocks: 256,
      maxModelLen: 1024,
      threads: 2,
      kvCacheDtype: 'float32',
    });
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
  });

  it('has 5 chat and 2 raw prompts', () => {
    expect(golden.cases.filter((c) => c.kind === 'chat')).toHaveLength(5);
    expect(golden.cases.filter((c) => c.kind === 'raw')).toHaveLength(2);
  });

  it('renders the chat template and tokenizes as llama.cpp does', async () => {
    for (const c of golden.cases) {
      if (c.kind === 'chat')
        expect(template.render(c.messages ?? [], { addGenerationPrompt: true })).toBe(c.text);
      expect(await tokenizer.encode(c.text, { addSpecialTokens: false })).toEqual(c.prompt_ids);
    }
  });

  const NEAR_TIE = 0.25;
  const FULL_MATCHES = 3;

  const run = async (c: GoldenCase, on: Engine = engine) => {
    const ids: number[] = [];
    const tops: { token: number; logprob: number }[][] = [];
    let finish: string | undefined;
    // As many tokens as llama.cpp made, and one more where it stopped at an end-of-turn token
    // (not in output_ids): that one must end the request.
    const params = {
      temperature: 0,
      maxTokens: c.output_ids.length + (c.stopped_at_eog ? 1 : 0),
      logprobs: 3,
    };
    for await (const event of on.generate(c.prompt_ids, params)) {
      if (event.token !== undefined) {
        ids.push(event.token);
        tops.push(event.topLogprobs ?? []);
      }
      if (event.finishReason) finish = event.finishReason;
    }
    return { ids, tops, finish };
  };

  /** Tokens that agree; throws (fails) unless full or parted at a near tie. */
  const agreement = (c: GoldenCase, r: Awaited<ReturnType<typeof run>>): number => {
    let same = 0;
    while (same < c.output_ids.length && r.ids[same] === c.output_ids[same]) same++;
    if (same === c.output_ids.length) return same;
    const top = r.tops[same] ?? [];
    const theirs = top.find((t) => t.token === c.output_ids[same]);
    const where = `${JSON.stringify(c.text.slice(-40))} token ${same}: ours ${r.ids[same]}, llama.cpp ${c.output_ids[same]}`;
    expect(theirs, `${where}: llama.cpp's token is not in our top 3 ${JSON.stringify(top)}`).toBeDefined();
    expect((top[0]?.logprob ?? 0) - (theirs?.logprob ?? -Infinity), `${where}: not a near tie`).toBeLessThan(
      NEAR_TIE,
    );
    return same;
  };

  it('follows llama.cpp greedy tokens, one request at a time', async () => {
    let full = 0;
    for (const c of golden.cases) {
      const r = await run(c);
      if (agreement(c, r) === c.output_ids.length) {
        full++;
        expect(r.finish).toBe(c.stopped_at_eog ? 'stop' : 'length');
        expect(r.ids).toHaveLength(c.output_ids.length + (c.stopped_at_eog ? 1 : 0));
      }
    }
    expect(full).toBeGreaterThanOrEqual(FULL_MATCHES);
  }, 120_000);

  it('and the same tokens with all seven in one batch', async () => {
    const alone: number[][] = [];
    for (const c of golden.cases) alone.push((await run(c)).ids);
    const batched = await Promise.all(golden.cases.map((c) => run(c)));
    expect(batched.map((r) => r.ids)).toEqual(alone);
  }, 120_000);

  it('and with the default f16 KV cache: parted only at close calls', async () => {
    const f16 = await Engine.load({
      modelDir: smol.path as string,
      numBlocks: 256,
      maxModelLen: 1024,
      threads: 2,
    });
    try {
      expect(engine.info.kvCacheDtype).toBe('float32');
      expect(f16.info.kvCacheDtype).toBe('float16'); // quantized weights: auto is f16
      let full = 0;
      for (const c of golden.cases) if (agreement(c, await run(c, f16)) === c.output_ids.length) full++;
      expect(full).toBeGreaterThanOrEqual(FULL_MATCHES);
    } finally {
      await f16.close();
    }
  }, 120_000);
});
