// The byte bound of a tokenizer (src/model/token-bytes.ts): L read from tokenizer.json, and the
// promise it makes, that a text encodes to at least ceil(countedBytes / L) tokens, checked against
// the real tokenizers on random and adversarial texts.
import { seededRandom } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModelFiles } from '../src/model/model-files.js';
import { byteLevelAlphabet, tokenByteBound } from '../src/model/token-bytes.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { TempDirs, tokenizerModels } from './support/temp-model.js';

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

const BYTES = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
const vocabOf = (pieces: string[]) => Object.fromEntries(pieces.map((p, i) => [p, i]));

/** A BPE tokenizer.json with `pieces` and the given parts. */
function bpe(pieces: string[], parts: Record<string, unknown> = {}, model: Record<string, unknown> = {}) {
  return {
    version: '1.0',
    truncation: null,
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: null,
    ...parts,
    model: {
      type: 'BPE',
      unk_token: '<unk>',
      fuse_unk: false,
      byte_fallback: false,
      vocab: vocabOf(pieces),
      merges: [],
      ...model,
    },
  };
}

describe('tokenByteBound on tokenizer.json shapes', () => {
  it('counts byte pieces as 1 byte, others by their UTF-8 length, added tokens included', () => {
    const bound = tokenByteBound(
      bpe(
        ['<unk>', ...BYTES, 'a', '▁the', 'hello'],
        { added_tokens: [{ id: 300, content: '<|long_special|>', special: true }] },
        { byte_fallback: true },
      ),
    );
    expect(bound.maxTokenBytes).toBe('<|long_special|>'.length);
    expect(bound.countsEveryChar).toBe(true); // complete byte fallback: no character is unknown
    expect(
      tokenByteBound(bpe(['<unk>', ...BYTES, 'a', '▁the'], {}, { byte_fallback: true })).maxTokenBytes,
    ).toBe(6);
  });

  it('counts a byte piece that merges can build by its literal length', () => {
    const pieces = ['<unk>', ...BYTES, '<', '0', 'x', '4', '1', '>', '<0x4', '1>'];
    const bound = tokenByteBound(bpe(pieces, {}, { byte_fallback: true, merges: ['<0x4 1>'] }));
    expect(bound.maxTokenBytes).toBe(6);
  });

  it('counts byte-level pieces in characters (one per byte of text)', () => {
    const pieces = [...byteLevelAlphabet(), 'ĠĠĠĠ', 'Ġhello'];
    const bound = tokenByteBound(
      bpe(pieces, { pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false } }, { unk_token: null }),
    );
    expect(bound.maxTokenBytes).toBe(6);
    expect(bound.countsEveryChar).toBe(true);
  });

  it('leaves out characters whose byte-level characters are missing (dropped without an unk token)', () => {
    const alphabet = byteLevelAlphabet();
    const missing = new Set([alphabet[0x04], alphabet[0xe2]]);
    const pieces = alphabet.filter((c) => !missing.has(c));
    const bound = tokenByteBound(bpe(pieces, { pre_tokenizer: { type: 'ByteLevel' } }, { unk_token: null }));
    expect(bound.maxTokenBytes).toBe(1);
    expect(bound.countsEveryChar).toBe(false);
    // '\x04' and '€' (E2 82 AC) are not counted; 'é' (C3 A9) and 'a' are.
    expect(bound.countedBytes('\u0004€éa')).toBe(3);
  });

  it('leaves out characters a vocabulary without byte pieces lacks, and counts replaced spaces', () => {
    const json = bpe(
      ['<unk>', '▁', 'a', 'b', '▁ab'],
      {
        normalizer: {
          type: 'Sequence',
          normalizers: [
            { type: 'Prepend', prepend: '▁' },
            { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
          ],
        },
      },
      { fuse_unk: true, byte_fallback: true },
    );
    const bound = tokenByteBound(json);
    expect(bound.maxTokenBytes).toBe(5);
    expect(bound.countedBytes('ab €€€ c')).toBe(4); // a, b and two spaces; € and c are unknown
    expect(bound.countedBytes('ab'.repeat(100), 10)).toBeGreaterThan(10); // stops early past 10
    expect(bound.countedBytes('\uD800')).toBe(0); // a lone surrogate is U+FFFD, unknown here
  });

  it('gives no bound where one token can cover unbounded text', () => {
    const cases: [unknown, RegExp][] = [
      [{ ...bpe(['a']), truncation: { max_length: 8 } }, /truncates/],
      [{ model: { type: 'WordPiece', vocab: { a: 0 } } }, /WordPiece, not BPE/],
      [{ model: { type: 'Unigram', vocab: [['a', 0]] } }, /Unigram, not BPE/],
      [bpe(['a'], {}, { continuing_subword_prefix: '##' }), /subwords/],
      [bpe(['a'], { normalizer: { type: 'Lowercase' } }), /normalizer Lowercase/],
      [bpe(['a'], { normalizer: { type: 'NFKC' } }), /normalizer NFKC/],
      [
        bpe(['a', '▁'], { normalizer: { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' } }),
        /regex/,
      ],
      [
        bpe(['a', 'b'], { normalizer: { type: 'Replace', pattern: { String: 'ab' }, content: 'a' } }),
        /shorter/,
      ],
      [bpe(['a'], { normalizer: { type: 'Prepend', prepend: '▁' } }), /outside the vocabulary/],
      [bpe(['a'], { pre_tokenizer: { type: 'Whitespace' } }), /pre-tokenizer Whitespace/],
      [
        bpe(['a'], { pre_tokenizer: { type: 'Split', pattern: { String: ' ' }, behavior: 'Removed' } }),
        /Removed/,
      ],
      [bpe(['a'], { pre_tokenizer: { type: 'Metaspace', replacement: '▁' } }), /Metaspace replacement/],
      [
        bpe(['a'], { added_tokens: [{ id: 1, content: '<mask>', lstrip: true, special: true }] }),
        /strips the whitespace/,
      ],
      [null, /not an object/],
    ];
    for (const [json, reason] of cases) {
      const bound = tokenByteBound(json);
      expect(bound.maxTokenBytes, String(reason)).toBeNull();
      expect(bound.reason).toMatch(reason);
    }
  });
});

/** Random text mixing what tokenizers treat specially: runs of spaces, unknown and control characters, specials. */
function randomText(rand: () => number, specials: readonly string[], longPieces: readonly string[]): string {
  const parts = [
    () => 'Once upon a time, there was a little girl named Lily. ',
    () => ' '.repeat(1 + Math.floor(rand() * 120)),
    () => '\n'.repeat(1 + Math.floor(rand() * 4)) + ' '.repeat(Math.floor(rand() * 80)),
    () => '#'.repeat(1 + Math.floor(rand() * 120)),
    () => String(Math.floor(rand() * 1e9)),
    () => '€'.repeat(1 + Math.floor(rand() * 50)),
    () => 'naïve 你好 😀 𝕏 \u00a0',
    () => '\u0004\u0006\u0013\u0014\u0016\u001d\u0000'.slice(0, 1 + Math.floor(rand() * 7)),
    () => '\uFFFD\uD800',
    () => specials[Math.floor(rand() * specials.length)] ?? '',
    () => longPieces[Math.floor(rand() * longPieces.length)] ?? '',
  ];
  let text = '';
  const n = 1 + Math.floor(rand() * 30);
  for (let i = 0; i < n; i++) text += parts[Math.floor(rand() * parts.length)]?.() ?? '';
  return text;
}

// L of each tokenizer: the longest token's bytes.
const BYTES_PER_TOKEN: Record<string, number> = {
  'tinystories-656k': 98,
  'tinystories-656k GGUF': 98,
  'SmolLM2 GGUF': 81,
  'Llama 2 (converted)': 48,
};

describe.each(tokenizerModels(dirs))('the byte bound of $name', ({ name, model, dir }) => {
  const expectedL = BYTES_PER_TOKEN[name];
  let tok: Tokenizer;
  let longPieces: string[];
  beforeAll(async () => {
    if (!model.path) return;
    tok = Tokenizer.fromModelFiles(await loadModelFiles(await dir()));
    // The texts of the longest pieces, the tokens that cover the most text.
    const byLength = Array.from({ length: tok.vocabSize }, (_, id) => id)
      .filter((id) => !tok.isSpecial(id))
      .sort((a, b) => (tok.piece(b)?.length ?? 0) - (tok.piece(a)?.length ?? 0));
    longPieces = byLength.slice(0, 20).map((id) => tok.decode([id]));
  });

  it.skipIf(!model.path)(`is ${expectedL} bytes per token${model.skipped}`, () => {
    expect(tok.byteBound.reason).toBeNull();
    expect(tok.byteBound.maxTokenBytes).toBe(expectedL);
  });

  it.skipIf(!model.path)(`never promises more tokens than a text encodes to${model.skipped}`, async () => {
    const L = tok.byteBound.maxTokenBytes as number;
    const specials = [...tok.specialTokenIds].map((id) => tok.piece(id) ?? '');
    const rand = seededRandom(23);
    const texts = [
      ...Array.from({ length: 300 }, () => randomText(rand, specials, longPieces)),
      ...longPieces.map((p) => p.repeat(50)),
      ...specials.map((s) => s.repeat(100)),
      ' '.repeat(5000),
      '\n'.repeat(3000),
      '€'.repeat(3000),
      '\u0004'.repeat(3000),
    ];
    for (const text of texts) {
      const ids = await tok.encode(text, { addSpecialTokens: false });
      const least = Math.ceil(tok.byteBound.countedBytes(text) / L);
      expect(ids.length, `${name}: ${JSON.stringify(text.slice(0, 60))}`).toBeGreaterThanOrEqual(least);
    }
  });
});
