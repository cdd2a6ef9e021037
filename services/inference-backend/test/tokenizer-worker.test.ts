// The tokenizer's encoding worker (src/model/encoder-worker.ts, tokenizer-worker.ts): the same ids
// as encoding on the main thread, errors as before, a dead worker replaced, shut down on close.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EncoderWorker } from '../src/model/encoder-worker.js';
import { loadModelFiles, type ModelFiles } from '../src/model/model-files.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { modelPath, optionalModel } from './support/models.js';
import { TempDirs, tokenizerModels } from './support/temp-model.js';

const tiny = optionalModel('tinystories-656k');

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

const TEXTS = [
  '',
  ' ',
  'a',
  '\n\n\t  ',
  'Once upon a time, there was a cat.',
  '<|start_story|>Once upon a time<|end_story|><unk>',
  '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
  'naïve café 你好 😀 🎉 ∑ 𝕏 \u00a0 \u200b',
  '\uFFFD\uD800 lone surrogate and replacement char',
  '\u0004\u0006\u0013 control bytes \u0000',
  '1234567890 3.14159 -42',
  '    indented\n        code();\n',
  'word '.repeat(2000),
];

describe.each(tokenizerModels(dirs))('encoding worker on $name', ({ name, model, dir }) => {
  let inThread: Tokenizer;
  let inWorker: Tokenizer;
  beforeAll(async () => {
    if (!model.path) return;
    const f: ModelFiles = await loadModelFiles(await dir());
    inThread = await Tokenizer.open(f, { worker: false });
    inWorker = await Tokenizer.open(f);
  });
  afterAll(async () => {
    await inWorker?.close();
  });

  it.skipIf(!model.path)(`gives the main thread's ids${model.skipped}`, async () => {
    expect(inThread.worker).toBeNull();
    expect(inWorker.worker).not.toBeNull();
    const before = inWorker.worker?.encodes ?? 0;
    for (const text of TEXTS) {
      for (const addSpecialTokens of [true, false]) {
        const ids = await inWorker.encodeIds(text, { addSpecialTokens });
        expect(ids).toBeInstanceOf(Int32Array);
        expect(Array.from(ids), `${name}: ${JSON.stringify(text.slice(0, 40))}`).toEqual(
          await inThread.encode(text, { addSpecialTokens }),
        );
      }
    }
    expect(inWorker.worker?.encodes).toBe(before + TEXTS.length * 2);
  });

  it.skipIf(!model.path)(`answers concurrent encodes each with its own ids${model.skipped}`, async () => {
    const texts = Array.from({ length: 40 }, (_, i) => `story ${i}: ${'a b '.repeat(i * 50)}`);
    const ids = await Promise.all(texts.map((t) => inWorker.encode(t)));
    for (const [i, text] of texts.entries()) expect(ids[i]).toEqual(await inThread.encode(text));
  });
});

describe.skipIf(!tiny.path)(`EncoderWorker lifecycle${tiny.skipped}`, () => {
  let files: ModelFiles;
  beforeAll(async () => {
    files = await loadModelFiles(modelPath('tinystories-656k'));
  });

  it('fails every encode a dying worker held with STRATA_INTERNAL, then starts a new one', async () => {
    const encoder = await EncoderWorker.start(files.tokenizer);
    const expected = await Tokenizer.fromModelFiles(files).encode('Once upon a time', {
      addSpecialTokens: false,
    });
    try {
      expect(Array.from(await encoder.encode('Once upon a time'))).toEqual(expected);
      expect(encoder.starts).toBe(1);
      // A long encode in flight, then a message the binding cannot take: it throws in the worker's
      // message handler, uncaught, and the worker dies with both encodes unanswered.
      const inFlight = encoder.encode('word '.repeat(100_000)).catch((e: unknown) => e);
      const fatal = await encoder.encode(42 as unknown as string).catch((e: unknown) => e);
      for (const err of [fatal, await inFlight]) {
        expect(err).toMatchObject({ code: 'STRATA_INTERNAL', statusCode: 500 });
        expect((err as Error).message).toMatch(/^the tokenizer worker stopped \(.*String.*\)/);
      }
      // The next encode gets a fresh worker and the right ids.
      expect(Array.from(await encoder.encode('Once upon a time'))).toEqual(expected);
      expect(encoder.starts).toBe(2);
    } finally {
      await encoder.close();
    }
  });

  it('fails encodes still waiting at close with STRATA_ENGINE_CLOSED, and later ones too', async () => {
    const encoder = await EncoderWorker.start(files.tokenizer);
    const waiting = encoder.encode('word '.repeat(200_000)).catch((e: unknown) => e);
    await encoder.close();
    expect(await waiting).toMatchObject({ code: 'STRATA_ENGINE_CLOSED' });
    await expect(encoder.encode('hi')).rejects.toMatchObject({ code: 'STRATA_ENGINE_CLOSED' });
  });

  it('rejects at start when the worker cannot load the tokenizer', async () => {
    const err = await EncoderWorker.start({
      kind: 'json',
      json: '{"model": {"type": "NoSuchModel"}}',
      origin: 'x',
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'STRATA_INTERNAL' });
    expect((err as Error).message).toMatch(/tokenizer worker stopped/);
  });

  it('encodes on the main thread again once the tokenizer is closed', async () => {
    const tok = await Tokenizer.open(files);
    const inWorker = await tok.encode('Once upon a time');
    expect(tok.worker).not.toBeNull();
    await tok.close();
    expect(tok.worker).toBeNull();
    expect(await tok.encode('Once upon a time')).toEqual(inWorker);
    expect(inWorker[0]).toBe(1);
  });
});
