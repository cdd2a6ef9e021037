// The default model behind the OpenAI API, driven by the official `openai` client on a real
// backend (port 0, the real engine, SmolLM2-135M-Instruct Q4_1): chat completions, streamed and
// not, end at the template's end-of-turn token with llama.cpp's greedy answer
// (test/golden/smollm2-q4_1-llamacpp.json), and the model card names the quantization.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOpenAiBackend, type TestBackend } from './support/backend.js';
import { smollm2Gguf } from './support/models.js';

const smol = smollm2Gguf();
interface GoldenCase {
  kind: string;
  messages?: { role: 'user' | 'system' | 'assistant'; content: string }[];
  prompt_ids: number[];
  output_ids: number[];
  stopped_at_eog: boolean;
  output_text: string;
}
const golden = JSON.parse(
  readFileSync(join(import.meta.dirname, 'golden', 'smollm2-q4_1-llamacpp.json'), 'utf8'),
) as {
  cases: GoldenCase[];
};
// A chat answer llama.cpp ended itself, at <|im_end|> (not in output_ids/output_text).
const ended = golden.cases.find((c) => c.kind === 'chat' && c.stopped_at_eog) as GoldenCase;
const answer = ended.output_text;
// Its request, greedy as llama.cpp's run was, with room to end by itself.
const request = {
  model: 'SmolLM2-135M-Instruct.Q4_1',
  messages: ended.messages ?? [],
  temperature: 0,
  max_tokens: 100,
};

describe.skipIf(!smol.path)(`OpenAI API on SmolLM2-135M-Instruct${smol.skipped}`, () => {
  let backend: TestBackend;
  let client: OpenAI;
  beforeAll(async () => {
    ({ backend, client } = await startOpenAiBackend(smol.path as string));
  }, 60_000);
  afterAll(async () => {
    await backend?.close();
  });

  it('lists the model with its format and quantization', async () => {
    const models = await client.models.list();
    expect(models.data[0]).toMatchObject({
      id: 'SmolLM2-135M-Instruct.Q4_1',
      format: 'gguf',
      quantization: 'Q4_1',
    });
  });

  it('answers a chat completion as llama.cpp does and stops at the end of the turn', async () => {
    const r = await client.chat.completions.create(request);
    expect(r.choices[0]?.message.content).toBe(answer);
    expect(r.choices[0]?.finish_reason).toBe('stop');
    // The end-of-turn token counts as a completion token, as in vLLM.
    expect(r.usage).toMatchObject({
      prompt_tokens: ended.prompt_ids.length,
      completion_tokens: ended.output_ids.length + 1,
    });
  }, 60_000);

  it('streams the same answer', async () => {
    const stream = await client.chat.completions.create({ ...request, stream: true });
    let text = '';
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(answer);
    expect(finish).toBe('stop');
  }, 60_000);
});
