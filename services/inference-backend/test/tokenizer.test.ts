import { rm } from 'node:fs/promises';
import path from 'node:path';
import { seededRandom } from '@strata/common/testing';
import tokenizers from 'tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelError } from '../src/model/errors.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { modelPath, optionalModel } from './support/models.js';
import { convertedLlama2Tokenizer, copyTinystories, mergeJson, TempDirs } from './support/temp-model.js';

const tiny = optionalModel('tinystories-656k');
const llama2Tokenizer = optionalModel('llama2-tokenizer');

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

// Ids from Hugging Face `tokenizers` (Python) on tinystories-656k/tokenizer.json.
const STORY = 'Once upon a time, there was a cat.';
const STORY_IDS = [80, 147, 201, 282, 215, 286, 476, 10];

describe.skipIf(!tiny.path)(`Tokenizer on tinystories-656k${tiny.skipped}`, () => {
  let tok: Tokenizer;
  beforeAll(async () => {
    tok = await Tokenizer.load(modelPath('tinystories-656k'));
  });

  it('exposes vocabulary size and special ids from the configs', () => {
    expect(tok.vocabSize).toBe(2048);
    expect(tok.bosTokenId).toBe(1);
    expect(tok.eosTokenIds).toEqual([2]);
    expect([...tok.specialTokenIds]).toEqual([0, 1, 2]);
    expect([0, 1, 2, 3].map((id) => tok.isSpecial(id))).toEqual([true, true, true, false]);
  });

  it('adds BOS (<|start_story|> = 1) unless told not to', async () => {
    expect(await tok.encode(STORY)).toEqual([1, ...STORY_IDS]);
    expect(await tok.encode(STORY, { addSpecialTokens: false })).toEqual(STORY_IDS);
    expect(await tok.encode('')).toEqual([1]);
  });

  it('decodes, skipping special tokens by default', () => {
    expect(tok.decode([1, ...STORY_IDS, 2])).toBe(STORY);
    expect(tok.decode([1, ...STORY_IDS], { skipSpecialTokens: false })).toBe(`<|start_story|> ${STORY}`);
  });

  it('ignores ids outside the vocabulary when decoding, as the binding does', () => {
    expect(tok.decode([...STORY_IDS, 2048, -1, 1.5])).toBe(STORY);
    expect(tok.piece(2048)).toBe(null);
    expect(tok.piece(147)).toBe('On');
  });

  it('decodes exactly as the binding does for random id sequences', async () => {
    const hf = tokenizers.Tokenizer.fromFile(path.join(modelPath('tinystories-656k'), 'tokenizer.json'));
    const rand = seededRandom(7);
    for (let n = 0; n < 300; n += 1) {
      const ids = Array.from({ length: 1 + Math.floor(rand() * 12) }, () => Math.floor(rand() * 2048));
      expect(tok.decode(ids, { skipSpecialTokens: false })).toBe(await hf.decode(ids, false));
    }
  });

  it('has no byte-fallback pieces (its vocabulary has no <0xNN> entries)', () => {
    expect(Array.from({ length: 2048 }, (_, id) => tok.isByteFallback(id)).includes(true)).toBe(false);
  });
});

describe.skipIf(!tiny.path)(`Tokenizer BOS/EOS per the configs${tiny.skipped}`, () => {
  it('follows add_bos_token: false and add_eos_token: true in tokenizer_config.json', async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'tokenizer_config.json', { add_bos_token: false, add_eos_token: true });
    const tok = await Tokenizer.load(dir);
    expect(await tok.encode(STORY)).toEqual([...STORY_IDS, 2]);
  });

  it('fails with STRATA_MODEL_FILES when tokenizer.json is not a tokenizer', async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'tokenizer.json', { model: { type: 'NoSuchModel' } });
    const err = await Tokenizer.load(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelError);
    expect((err as ModelError).code).toBe('STRATA_MODEL_FILES');
    expect((err as ModelError).file).toBe(path.join(dir, 'tokenizer.json'));
  });

  it('fails with STRATA_MODEL_FILES when tokenizer.json is missing', async () => {
    const dir = await copyTinystories(dirs);
    await rm(path.join(dir, 'tokenizer.json'));
    await expect(Tokenizer.load(dir)).rejects.toMatchObject({ code: 'STRATA_MODEL_FILES' });
  });
});

describe.skipIf(!llama2Tokenizer.path)(
  `Tokenizer on the converted Llama 2 vocabulary (byte fallback)${llama2Tokenizer.skipped}`,
  () => {
    let tok: Tokenizer;
    beforeAll(async () => {
      tok = await Tokenizer.load(await convertedLlama2Tokenizer(dirs));
    });

    it('marks exactly the 256 <0xNN> pieces (ids 3..258) as byte fallback', () => {
      const bytes = Array.from({ length: 32000 }, (_, id) => id).filter((id) => tok.isByteFallback(id));
      expect(bytes).toEqual(Array.from({ length: 256 }, (_, i) => i + 3));
      expect(tok.piece(3 + 0xe2)).toBe('<0xE2>');
    });

    it('decodes one- and two-id windows (memoized) exactly as the binding does, cached or not', async () => {
      const hf = tokenizers.Tokenizer.fromFile(
        path.join(await convertedLlama2Tokenizer(dirs), 'tokenizer.json'),
      );
      const rand = seededRandom(11);
      // Half of the ids are byte pieces, so byte runs and invalid UTF-8 are in the mix.
      const id = () => (rand() < 0.5 ? 3 + Math.floor(rand() * 256) : Math.floor(rand() * 32000));
      const windows = Array.from({ length: 400 }, () => (rand() < 0.3 ? [id()] : [id(), id()]));
      for (const ids of [...windows, ...windows]) {
        expect(tok.decode(ids, { skipSpecialTokens: false }), `ids ${ids}`).toBe(await hf.decode(ids, false));
      }
      expect(tok.decode([32000], { skipSpecialTokens: false })).toBe('');
      expect(tok.decode([29871, -1], { skipSpecialTokens: false })).toBe(await hf.decode([29871], false));
    });

    it('encodes an emoji as its four UTF-8 bytes and decodes it back', async () => {
      // '▁' (29871), then F0 9F 98 80 as byte pieces 3 + byte.
      const ids = await tok.encode('😀', { addSpecialTokens: false });
      expect(ids).toEqual([29871, 3 + 0xf0, 3 + 0x9f, 3 + 0x98, 3 + 0x80]);
      expect(tok.decode(ids)).toBe('😀');
      expect(await tok.encode('😀')).toEqual([1, ...ids]);
    });
  },
);
