import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { randomInt, seededRandom } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IncrementalDetokenizer } from '../src/model/detokenizer.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { modelPath, optionalModel } from './support/models.js';
import { convertedLlama2Tokenizer, TempDirs } from './support/temp-model.js';

const tiny = optionalModel('tinystories-656k');
const llama2Tokenizer = optionalModel('llama2-tokenizer');

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

const REPLACEMENT = '\uFFFD';

/** Pushes `ids` in chunks of the given sizes (cycled); returns every delta, finish() last. */
function stream(
  detok: IncrementalDetokenizer,
  ids: readonly number[],
  chunks: readonly number[] = [1],
): string[] {
  const deltas: string[] = [];
  for (let i = 0, c = 0; i < ids.length; c += 1) {
    const size = chunks[c % chunks.length] ?? 1;
    deltas.push(detok.push(ids.slice(i, i + size)));
    i += size;
  }
  deltas.push(detok.finish());
  return deltas;
}

/** The invariants every stream must keep, whatever the ids. */
function expectSound(deltas: readonly string[], expected: string): void {
  expect(deltas.join('')).toBe(expected);
  for (const [i, delta] of deltas.entries()) {
    expect(delta.isWellFormed()).toBe(true);
    // Only finish() may end on U+FFFD: earlier it would mean an unfinished character was sent.
    if (i < deltas.length - 1) expect(delta.endsWith(REPLACEMENT)).toBe(false);
  }
}

function randomChunks(rand: () => number): number[] {
  return Array.from({ length: 5 }, () => 1 + randomInt(rand, 3));
}

const TEXT_PARTS = [
  'Once',
  ' upon',
  ' a time',
  ',',
  ' the',
  ' cat',
  ' sat',
  '.',
  '\n',
  '  ',
  ' ',
  'é',
  'naïve',
  '42',
  '你好',
  '龘',
  '😀',
  '🎉',
  '𝄞',
  '👩‍👩‍👧',
  'ß',
  '™',
  '\t',
];

function randomText(rand: () => number, parts: number): string {
  return Array.from({ length: parts }, () => TEXT_PARTS[randomInt(rand, TEXT_PARTS.length)]).join('');
}

describe.skipIf(!tiny.path)(
  `IncrementalDetokenizer on tinystories-656k (no byte fallback)${tiny.skipped}`,
  () => {
    let tok: Tokenizer;
    beforeAll(async () => {
      tok = await Tokenizer.load(modelPath('tinystories-656k'));
    });

    it('streams a story token by token, leading-space pieces included', async () => {
      // Pieces: '▁' 'On' 'ce▁' 'upon▁a▁tim' 'e,▁' 'there▁was▁a▁' 'cat' '.'
      const ids = await tok.encode('Once upon a time, there was a cat.');
      const deltas = stream(new IncrementalDetokenizer(tok), ids);
      expect(deltas).toEqual(['', '', 'On', 'ce ', 'upon a tim', 'e, ', 'there was a ', 'cat', '.', '']);
    });

    it('keeps special tokens when asked', async () => {
      const ids = [1, ...(await tok.encode('Tom and Lily', { addSpecialTokens: false })), 2];
      const deltas = stream(new IncrementalDetokenizer(tok, { skipSpecialTokens: false }), ids);
      expectSound(deltas, tok.decode(ids, { skipSpecialTokens: false }));
      expect(deltas.join('')).toBe('<|start_story|> Tom and Lily <|end_story|>');
    });

    it('matches decode() for random id sequences in random chunks', () => {
      const rand = seededRandom(11);
      for (let n = 0; n < 300; n += 1) {
        const ids = Array.from({ length: 1 + randomInt(rand, 40) }, () => randomInt(rand, 2048));
        expectSound(stream(new IncrementalDetokenizer(tok), ids, randomChunks(rand)), tok.decode(ids));
      }
    });
  },
);

describe.skipIf(!llama2Tokenizer.path)(
  `IncrementalDetokenizer on the Llama 2 vocabulary (SentencePiece byte fallback)${llama2Tokenizer.skipped}`,
  () => {
    let tok: Tokenizer;
    beforeAll(async () => {
      tok = await Tokenizer.load(await convertedLlama2Tokenizer(dirs));
    });

    it('holds the bytes of an emoji until the character is complete and the run has ended', async () => {
      const ids = await tok.encode('Hi 😀 there', { addSpecialTokens: false });
      // '▁Hi' '▁' <0xF0> <0x9F> <0x98> <0x80> '▁there'
      expect(ids.map((id) => tok.isByteFallback(id))).toEqual([false, false, true, true, true, true, false]);
      expect(stream(new IncrementalDetokenizer(tok), ids)).toEqual([
        'Hi',
        ' ',
        '',
        '',
        '',
        '',
        '😀 there',
        '',
      ]);
    });

    it('flushes a character held at the end of the sequence', async () => {
      const ids = await tok.encode('é龘', { addSpecialTokens: false });
      expect(ids.filter((id) => tok.isByteFallback(id))).toHaveLength(3); // 龘 = E9 BE 98
      const deltas = stream(new IncrementalDetokenizer(tok), ids);
      expect(deltas.at(-1)).toBe('龘');
      expect(deltas.join('')).toBe('é龘');
    });

    it('sends a byte run that turns out invalid as U+FFFD per byte, as decode() does', () => {
      // E9 BE is the start of 龘 but '▁a' ends the run: both bytes are invalid.
      const ids = [3 + 0xe9, 3 + 0xbe, 263];
      const deltas = stream(new IncrementalDetokenizer(tok), ids);
      expect(deltas).toEqual(['', '', '�� a', '']);
      expect(tok.decode(ids)).toBe('�� a');
    });

    it('continues the prompt text: the first output word keeps its space', async () => {
      const prompt = await tok.encode('Once upon a');
      const time = [931];
      expect(tok.piece(931)).toBe('▁time');
      expect(new IncrementalDetokenizer(tok, { promptIds: prompt }).push(time)).toBe(' time');
      expect(new IncrementalDetokenizer(tok).push(time)).toBe('time');
    });

    it('completes a character that the prompt cut in the middle', async () => {
      const ids = await tok.encode('Hi 😀', { addSpecialTokens: false });
      const detok = new IncrementalDetokenizer(tok, { promptIds: ids.slice(0, -2) });
      expect(stream(detok, [...ids.slice(-2), 727])).toEqual(['', '', '😀 there', '']);
    });

    it('never sends a broken character for random text in random chunks', async () => {
      const rand = seededRandom(6);
      for (let n = 0; n < 200; n += 1) {
        const text = randomText(rand, 1 + randomInt(rand, 12));
        const ids = await tok.encode(text, { addSpecialTokens: false });
        const deltas = stream(new IncrementalDetokenizer(tok), ids, randomChunks(rand));
        expectSound(deltas, tok.decode(ids));
        expect(deltas.join('')).toBe(text);
        expect(deltas.some((d) => d.includes(REPLACEMENT))).toBe(false);
      }
    });

    it('continues random prompts exactly, wherever the prompt/output split falls', async () => {
      const rand = seededRandom(8);
      for (let n = 0; n < 200; n += 1) {
        const ids = await tok.encode(randomText(rand, 2 + randomInt(rand, 10)));
        const split = randomInt(rand, ids.length + 1);
        const prompt = ids.slice(0, split);
        const deltas = stream(
          new IncrementalDetokenizer(tok, { promptIds: prompt }),
          ids.slice(split),
          randomChunks(rand),
        );
        const whole = tok.decode(ids);
        const promptText = tok.decode(prompt);
        if (promptText.endsWith(REPLACEMENT)) {
          // The prompt ends inside a character: its completion comes with the output.
          expect(whole.endsWith(deltas.join(''))).toBe(true);
        } else {
          expect(promptText + deltas.join('')).toBe(whole);
        }
        expect(deltas.some((d) => d.includes(REPLACEMENT))).toBe(false);
      }
    });

    it('matches decode() for random ids rich in byte pieces and special tokens', () => {
      const rand = seededRandom(9);
      const pick = (): number => {
        const r = rand();
        if (r < 0.5) return 3 + randomInt(rand, 256); // a byte piece
        if (r < 0.55) return randomInt(rand, 3); // <unk> <s> </s>
        return randomInt(rand, 32000);
      };
      for (let n = 0; n < 400; n += 1) {
        const ids = Array.from({ length: 1 + randomInt(rand, 30) }, pick);
        expectSound(stream(new IncrementalDetokenizer(tok), ids, randomChunks(rand)), tok.decode(ids));
        const keep = { skipSpecialTokens: false };
        expectSound(
          stream(new IncrementalDetokenizer(tok, keep), ids, randomChunks(rand)),
          tok.decode(ids, keep),
        );
      }
    });

    it('keeps its decode window a few ids long over a long stream', async () => {
      const ids = await tok.encode('The cat sat on the mat. 你好 😀 naïve 🎉!\n'.repeat(150), {
        addSpecialTokens: false,
      });
      expect(ids.length).toBeGreaterThan(3000);
      const detok = new IncrementalDetokenizer(tok);
      let widest = 0;
      let text = '';
      for (const id of ids) {
        text += detok.push([id]);
        widest = Math.max(widest, detok.windowSize);
      }
      text += detok.finish();
      expect(text).toBe(tok.decode(ids));
      // The widest window spans one emoji's bytes (4) plus the ids around them.
      expect(widest).toBeLessThanOrEqual(7);
    });

    it('refuses ids after finish()', () => {
      const detok = new IncrementalDetokenizer(tok);
      expect(detok.push([1])).toBe('');
      expect(detok.finish()).toBe('');
      expect(detok.finish()).toBe('');
      expect(() => detok.push([263])).toThrow('IncrementalDetokenizer.push() after finish()');
    });
  },
);

describe('IncrementalDetokenizer on a byte-level BPE (GPT-2 / Llama 3 style) tokenizer', () => {
  let tok: Tokenizer;
  beforeAll(async () => {
    tok = await Tokenizer.load(await byteLevelTokenizerDir());
  });

  it('holds a character whose bytes are split across tokens', async () => {
    const ids = await tok.encode('a€', { addSpecialTokens: false });
    expect(ids).toEqual([0x61, 0xe2, 0x82, 0xac]);
    expect(stream(new IncrementalDetokenizer(tok), ids)).toEqual(['a', '', '', '€', '']);
  });

  it('never sends a broken character for random text, and matches decode() for random bytes', async () => {
    const rand = seededRandom(12);
    for (let n = 0; n < 150; n += 1) {
      const text = randomText(rand, 1 + randomInt(rand, 10));
      const ids = await tok.encode(text, { addSpecialTokens: false });
      const deltas = stream(new IncrementalDetokenizer(tok), ids, randomChunks(rand));
      expectSound(deltas, text);
      expect(deltas.some((d) => d.includes(REPLACEMENT))).toBe(false);

      const bytes = Array.from({ length: 1 + randomInt(rand, 20) }, () => randomInt(rand, 256));
      expectSound(stream(new IncrementalDetokenizer(tok), bytes, randomChunks(rand)), tok.decode(bytes));
    }
  });
});

/**
 * A real tokenizer.json with GPT-2's byte-level alphabet and no merges: one token per byte,
 * id = byte value, so multi-byte characters always span tokens.
 */
async function byteLevelTokenizerDir(): Promise<string> {
  const dir = await dirs.make('strata-bytelevel-');
  const printable = (b: number): boolean => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  const vocab: Record<string, number> = {};
  let shifted = 0;
  for (let b = 0; b < 256; b += 1) {
    vocab[String.fromCodePoint(printable(b) ? b : 256 + shifted++)] = b;
  }
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: null,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: [],
    },
  };
  await writeFile(path.join(dir, 'tokenizer.json'), JSON.stringify(tokenizer));
  await writeFile(path.join(dir, 'tokenizer_config.json'), JSON.stringify({}));
  await writeFile(path.join(dir, 'config.json'), JSON.stringify({ vocab_size: 256 }));
  return dir;
}
