// Text in, text out, on the real tinystories-656k model: detokenization, stop strings, abort,
// and the end-of-generation ids the engine does not know by itself.
import { symlink } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { type TextEvent, TextGenerator } from '../src/engine/text-generation.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { modelPath, optionalModel } from './support/models.js';
import { copyTinystories, mergeJson, TempDirs } from './support/temp-model.js';

const tiny = optionalModel('tinystories-656k');

let generator: TextGenerator;
beforeAll(async () => {
  const dir = modelPath('tinystories-656k');
  generator = new TextGenerator(
    await Engine.load({ modelDir: dir, numBlocks: 256 }),
    await Tokenizer.load(dir),
  );
});
afterAll(() => generator.engine.close());

const greedy = { temperature: 0, maxTokens: 60, ignoreEos: true };
const PROMPT = 'Once upon a time, there was a little dog named';

describe.skipIf(!tiny.path)(`text generation${tiny.skipped}`, () => {
  it('streams deltas whose concatenation is the decoded output', async () => {
    const { text, tokenIds, done } = await generator.complete({ prompt: PROMPT, params: greedy });
    expect(tokenIds).toHaveLength(60);
    expect(done).toMatchObject({ finishReason: 'length', usage: { outputTokens: 60 } });
    expect(done.usage.inputTokens).toBe((await generator.tokenizer.encode(PROMPT)).length);
    const promptIds = await generator.tokenizer.encode(PROMPT);
    const full = generator.tokenizer.decode([...promptIds, ...tokenIds]);
    expect(full).toBe(generator.tokenizer.decode(promptIds) + text);
  });

  it('keeps the leading space of the first output word, as in the continued text', async () => {
    // Cut a greedy continuation just before a word-start piece ("▁...") and continue from there.
    const tok = generator.tokenizer;
    const base = await generator.complete({ prompt: PROMPT, params: greedy });
    const k = base.tokenIds.findIndex((id, i) => i > 0 && (tok.piece(id) ?? '').startsWith('\u2581'));
    expect(k).toBeGreaterThan(0);
    const prefix = [...(await tok.encode(PROMPT)), ...base.tokenIds.slice(0, k)];
    const next = await generator.complete({ prompt: prefix, params: { ...greedy, maxTokens: 3 } });
    expect(next.tokenIds[0]).toBe(base.tokenIds[k]);
    expect(next.text).toMatch(/^ \S/);
    expect(tok.decode([...prefix, ...next.tokenIds])).toBe(tok.decode(prefix) + next.text);
  });

  it('ends the output before a stop string that spans tokens, and frees the request', async () => {
    const { text } = await generator.complete({ prompt: PROMPT, params: greedy });
    // A stop string made of the end of one word and the start of the next, from the middle.
    const cut = Math.floor(text.length / 2);
    const space = text.indexOf(' ', cut);
    const stop = text.slice(space - 2, space + 3);
    const events: TextEvent[] = [];
    for await (const e of generator.stream({ prompt: PROMPT, params: greedy, stop: [stop] })) events.push(e);
    const done = events.at(-1);
    const streamed = events.map((e) => e.text).join('');
    expect(done).toMatchObject({ type: 'done', finishReason: 'stop', stop });
    expect(streamed).toBe(text.slice(0, text.indexOf(stop)));
    expect(done?.type === 'done' && done.usage.outputTokens).toBeLessThan(60);
    await new Promise((r) => setTimeout(r, 50));
    expect(generator.engine.stats().kvBlocksUsed).toBe(0);
  });

  it('keeps the stop string when asked, and sends everything when no stop matches', async () => {
    const { text } = await generator.complete({ prompt: PROMPT, params: greedy });
    const stop = text.slice(10, 14);
    const kept = await generator.complete({
      prompt: PROMPT,
      params: greedy,
      stop: [stop],
      includeStopString: true,
    });
    expect(kept.text).toBe(text.slice(0, text.indexOf(stop) + stop.length));
    const none = await generator.complete({ prompt: PROMPT, params: greedy, stop: ['\u2603 never'] });
    expect(none.text).toBe(text);
    expect(none.done.finishReason).toBe('length');
  });

  it('finishes with abort when the caller aborts', async () => {
    const controller = new AbortController();
    let tokens = 0;
    let last: TextEvent | undefined;
    for await (const e of generator.stream({
      prompt: PROMPT,
      params: { ...greedy, maxTokens: 400 },
      signal: controller.signal,
    })) {
      last = e;
      if (e.type === 'token' && ++tokens === 4) controller.abort();
    }
    expect(last).toMatchObject({ type: 'done', finishReason: 'abort' });
  });

  it('rejects an empty prompt and a bad stop string before queueing anything', async () => {
    await expect(generator.complete({ prompt: [], params: greedy })).rejects.toMatchObject({
      code: 'STRATA_INVALID_REQUEST',
    });
    await expect(generator.complete({ prompt: PROMPT, params: greedy, stop: [''] })).rejects.toMatchObject({
      code: 'STRATA_INVALID_PARAM',
    });
  });
});

describe.skipIf(!tiny.path)(`end-of-generation ids beyond the engine's own${tiny.skipped}`, () => {
  const dirs = new TempDirs();
  let withEnd: TextGenerator;
  /** A token of the greedy output, not its first: made the tokenizer's eos_token below. */
  let end: number;
  beforeAll(async () => {
    const base = await generator.complete({ prompt: PROMPT, params: greedy });
    end = base.tokenIds.find((id, i) => i >= 3 && base.tokenIds.indexOf(id) > 0) as number;
    // config.json's and generation_config's eos stay 2: the engine stops at 2 only, the model
    // files end generation at 2 and `end` (as a GGUF file's eot id would).
    const dir = await copyTinystories(dirs);
    await symlink(
      path.join(modelPath('tinystories-656k'), 'model.safetensors'),
      path.join(dir, 'model.safetensors'),
    );
    const piece = generator.tokenizer.piece(end);
    await mergeJson(dir, 'tokenizer_config.json', { eos_token: piece });
    withEnd = new TextGenerator(
      await Engine.load({ modelDir: dir, numBlocks: 256 }),
      await Tokenizer.load(dir),
    );
  });
  afterAll(async () => {
    await withEnd?.engine.close();
    await dirs.removeAll();
  });

  it('knows which ids the engine does not stop at', () => {
    expect(withEnd.engine.info.model.eosTokenIds).toEqual([2]);
    expect(withEnd.tokenizer.eosTokenIds).toEqual([2, end]);
    expect(withEnd.extraEndIds).toEqual([end]);
    expect(generator.extraEndIds).toEqual([]);
  });

  it('ends the output at the first of them, unless the request ignores EOS', async () => {
    const all = await withEnd.complete({ prompt: PROMPT, params: greedy });
    const first = all.tokenIds.indexOf(end);
    expect(first).toBeGreaterThan(0);
    expect(all.done.finishReason).toBe('length');
    const ended = await withEnd.complete({ prompt: PROMPT, params: { ...greedy, ignoreEos: false } });
    expect(ended.tokenIds).toEqual(all.tokenIds.slice(0, first + 1));
    expect(ended.done.finishReason).toBe('stop');
    // The engine alone (the unedited model) runs on past it.
    const plain = await generator.complete({ prompt: PROMPT, params: { ...greedy, ignoreEos: false } });
    expect(plain.tokenIds.length).toBeGreaterThan(first + 1);
  });

  it("adds them to the request's own stop token ids, once", () => {
    expect(withEnd.samplingParams({ stopTokenIds: [5, end] })).toEqual({ stopTokenIds: [5, end] });
    expect(withEnd.samplingParams({ stopTokenIds: [5], maxTokens: 3 })).toEqual({
      stopTokenIds: [5, end],
      maxTokens: 3,
    });
    expect(withEnd.samplingParams({ ignoreEos: true })).toEqual({ ignoreEos: true });
    expect(generator.samplingParams({ maxTokens: 3 })).toEqual({ maxTokens: 3 });
  });
});
