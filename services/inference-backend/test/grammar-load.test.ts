// Structured output's vocabulary read with no engine (Engine.loadGrammar, so the service reads it
// while the engine loads), then taken by an engine (useGrammar): the real addon and engine on
// tinystories-656k. A vocabulary read for another model, or without the model's end-of-sequence
// id, is refused by name; a grammar handle is not a constraint handle, nor the other way round.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { loadNativeAddon, type NativeGrammar } from '../src/native.js';
import { modelPath, optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');
const grammarBuilt = loadNativeAddon().buildInfo().grammar;
const skipped = tiny.skipped || (grammarBuilt ? '' : ' (skipped: the addon was built without llguidance)');

describe.skipIf(!tiny.path || !grammarBuilt)(`grammar vocabulary before the engine${skipped}`, () => {
  let json: string;
  let engine: Engine;
  beforeAll(async () => {
    json = readFileSync(join(modelPath('tinystories-656k'), 'tokenizer.json'), 'utf8');
    engine = await Engine.load({
      modelDir: modelPath('tinystories-656k'),
      threads: 1,
      numBlocks: 64,
      maxModelLen: 256,
    });
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
  });

  it('reads a vocabulary with no engine, which an engine of that model then uses', async () => {
    const { vocabSize, eosTokenIds } = engine.info.model;
    const read = await Engine.loadGrammar(json, vocabSize, eosTokenIds);
    expect(read.version).toMatch(/llguidance/);
    expect(read.seconds).toBeGreaterThan(0);
    engine.useGrammar(read.grammar);
    const c = await engine.compileConstraint('regex', 'Once upon a time[a-z ,.]{0,40}');
    const tokens: number[] = [];
    for await (const step of engine.generate([1], { maxTokens: 12, temperature: 0 }, { constraint: c })) {
      if (step.token !== undefined) tokens.push(step.token);
    }
    expect(tokens.length).toBeGreaterThan(0);
    // The regex's fixed start, token by token: the constraint held.
    const pieces = JSON.parse(json).model.vocab as Record<string, number>;
    const text = Object.fromEntries(Object.entries(pieces).map(([piece, id]) => [id, piece]));
    expect(
      tokens
        .map((t) => text[t] ?? '')
        .join('')
        .replaceAll('\u2581', ' ')
        .trimStart(),
    ).toMatch(/^Once upon a time/);
  });

  it("reads and uses the model's own vocabulary in one call (engine.loadGrammar)", async () => {
    const read = await engine.loadGrammar(json, []); // the model's own eos ids join these
    expect(read.version).toMatch(/llguidance/);
    expect((await engine.compileConstraint('regex', '[a-z]{1,4}')).compileSeconds).toBeGreaterThanOrEqual(0);
  });

  it("refuses a vocabulary read for another size, or without the model's end-of-sequence id", async () => {
    const { vocabSize, eosTokenIds } = engine.info.model;
    const wider = await Engine.loadGrammar(json, vocabSize + 64, eosTokenIds);
    expect(() => engine.useGrammar(wider.grammar)).toThrow(
      expect.objectContaining({
        code: 'STRATA_INVALID_CONFIG',
        message: expect.stringMatching(/vocabulary of 2112/),
      }),
    );
    const noEos = await Engine.loadGrammar(json, vocabSize, [5]); // another id ends its outputs
    expect(() => engine.useGrammar(noEos.grammar)).toThrow(
      expect.objectContaining({
        code: 'STRATA_INVALID_CONFIG',
        message: expect.stringMatching(/end-of-sequence token 2/),
      }),
    );
  });

  it('refuses bad arguments and a tokenizer.json llguidance cannot read, by code', async () => {
    const bad: [string, number, number[]][] = [
      [json, 0, [2]],
      [json, 1.5, [2]],
      [json, 2048, [2048]],
      [json, 2048, [-1]],
      [json, 2048, []], // no end of an output at all
    ];
    for (const [text, vocab, eos] of bad) {
      await expect(Engine.loadGrammar(text, vocab, eos), `${vocab} ${eos}`).rejects.toMatchObject({
        code: 'STRATA_INVALID_CONFIG',
      });
    }
    await expect(Engine.loadGrammar('{"not": "a tokenizer"}', 2048, [2])).rejects.toMatchObject({
      code: 'STRATA_INVALID_CONFIG',
    });
  });

  it('keeps grammar and constraint handles apart', async () => {
    const c = await engine.compileConstraint('regex', '[a-z]{1,4}');
    expect(() => engine.useGrammar(c.handle as NativeGrammar)).toThrow(
      expect.objectContaining({ code: 'STRATA_INVALID_CONFIG' }),
    );
    const { grammar } = await Engine.loadGrammar(
      json,
      engine.info.model.vocabSize,
      engine.info.model.eosTokenIds,
    );
    expect(() =>
      engine.generate([1], { maxTokens: 2 }, { constraint: { handle: grammar, compileSeconds: 0 } }),
    ).toThrow(expect.objectContaining({ code: 'STRATA_INVALID_PARAM' }));
  });
});
