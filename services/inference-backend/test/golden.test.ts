// Correctness against an independent reference: Hugging Face transformers (CPU, fp32) on the
// same weights, token for token under greedy decoding, and last-position log-probabilities
// within 1e-4. Goldens: native/engine/model/tests/golden (tinystories-656k, make_golden.py) and
// test/golden/stories260k.json (converted llama2.c model, tools/make_golden_llama2c.py).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { convertLlama2c } from '../src/convert/llama2c.js';
import { Engine } from '../src/engine/engine.js';
import { modelPath, optionalModel } from './support/models.js';
import { collect } from './support/token-streams.js';

const tiny = optionalModel('tinystories-656k');
const stories = optionalModel('stories260K');

interface GoldenCase {
  promptIds: number[];
  generatedIds: number[];
  lastLogits: number[];
}

function logSoftmax(logits: number[]): number[] {
  const max = Math.max(...logits);
  const lse = max + Math.log(logits.reduce((s, x) => s + Math.exp(x - max), 0));
  return logits.map((x) => x - lse);
}

async function checkAgainstGolden(modelDir: string, cases: GoldenCase[]): Promise<void> {
  const engine = await Engine.load({ modelDir, numBlocks: 256 });
  try {
    // All prompts at once: batch composition must not change any greedy output.
    const runs = await Promise.all(
      cases.map((c) =>
        collect(
          engine.generate(c.promptIds, {
            temperature: 0,
            ignoreEos: true,
            maxTokens: c.generatedIds.length,
            logprobs: 20,
          }),
        ),
      ),
    );
    runs.forEach((events, i) => {
      const golden = cases[i] as GoldenCase;
      expect(events.map((e) => e.token)).toEqual(golden.generatedIds);
      // The first token's top-20 log-probabilities come from the last prompt position's logits.
      const reference = logSoftmax(golden.lastLogits);
      const top = events[0]?.topLogprobs ?? [];
      expect(top).toHaveLength(20);
      const maxDiff = Math.max(...top.map((t) => Math.abs(t.logprob - (reference[t.token] as number))));
      expect(maxDiff).toBeLessThanOrEqual(1e-4);
    });
  } finally {
    await engine.close();
  }
}

describe('greedy decoding matches Hugging Face transformers', () => {
  const temp = mkdtempSync(join(tmpdir(), 'strata-golden-'));
  afterAll(() => rmSync(temp, { recursive: true, force: true }));

  it.skipIf(!tiny.path)(`on tinystories-656k (5 prompts x 100 tokens)${tiny.skipped}`, async () => {
    const golden = JSON.parse(
      readFileSync(
        join(import.meta.dirname, '..', 'native/engine/model/tests/golden/tinystories-656k.json'),
        'utf8',
      ),
    ) as { cases: { prompt_ids: number[]; greedy_ids: number[]; last_logits: number[] }[] };
    expect(golden.cases).toHaveLength(5);
    await checkAgainstGolden(
      modelPath('tinystories-656k'),
      golden.cases.map((c) => ({
        promptIds: c.prompt_ids,
        generatedIds: c.greedy_ids,
        lastLogits: c.last_logits,
      })),
    );
  });

  it.skipIf(!stories.path)(
    `on stories260K converted from llama2.c (5 prompts x 60 tokens)${stories.skipped}`,
    async () => {
      const source = modelPath('stories260K');
      const out = join(temp, 'stories260K-hf');
      await convertLlama2c({
        checkpoint: join(source, 'stories260K.bin'),
        tokenizerModel: join(source, 'tok512.model'),
        outDir: out,
      });
      const golden = JSON.parse(
        readFileSync(join(import.meta.dirname, 'golden', 'stories260k.json'), 'utf8'),
      ) as {
        prompts: { prompt_ids: number[]; generated_ids: number[]; last_prompt_logits: number[] }[];
      };
      expect(golden.prompts).toHaveLength(5);
      await checkAgainstGolden(
        out,
        golden.prompts.map((c) => ({
          promptIds: c.prompt_ids,
          generatedIds: c.generated_ids,
          lastLogits: c.last_prompt_logits,
        })),
      );
    },
  );
});
