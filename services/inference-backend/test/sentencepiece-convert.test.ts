import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildHfTokenizer } from '../src/convert/hf-tokenizer.js';
import { parseSentencePieceModel, type SentencePieceModel } from '../src/convert/sentencepiece-model.js';
import { ModelError } from '../src/model/errors.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { modelPath, optionalModel } from './support/models.js';
import { convertedLlama2Tokenizer, readJsonFile, TempDirs } from './support/temp-model.js';
import { thrown } from './support/thrown.js';

const stories = optionalModel('stories260K');
const llama2Tokenizer = optionalModel('llama2-tokenizer');

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

async function parseModel(dir: string, name: string): Promise<SentencePieceModel> {
  return parseSentencePieceModel(await readFile(path.join(modelPath(dir), name)));
}

/** Protobuf bytes: a varint key (field << 3 | wire) then the payload. */
function field(num: number, wire: number, payload: number[]): number[] {
  return [...varint((num << 3) | wire), ...payload];
}
function varint(n: number | bigint): number[] {
  let v = BigInt.asUintN(64, BigInt(n));
  const out: number[] = [];
  do {
    const byte = Number(v & 0x7fn);
    v >>= 7n;
    out.push(v > 0n ? byte | 0x80 : byte);
  } while (v > 0n);
  return out;
}
function lengthDelimited(num: number, bytes: number[]): number[] {
  return field(num, 2, [...varint(bytes.length), ...bytes]);
}
function piece(text: string, score: number, type: number): number[] {
  const f = new Uint8Array(new Float32Array([score]).buffer);
  return lengthDelimited(1, [
    ...lengthDelimited(1, [...new TextEncoder().encode(text)]),
    ...field(2, 5, [...f]),
    ...field(3, 0, varint(type)),
  ]);
}

describe('parseSentencePieceModel', () => {
  // Expected values read with sentencepiece's own protobuf classes (sentencepiece_model_pb2).
  it.skipIf(!stories.path)(
    `reads tok512.model: pieces, scores, types, trainer and normalizer specs${stories.skipped}`,
    async () => {
      const m = await parseModel('stories260K', 'tok512.model');
      expect(m.pieces).toHaveLength(512);
      expect(m.pieces.slice(0, 4)).toEqual([
        { piece: '<unk>', score: 0, type: 2 },
        { piece: '<s>', score: 0, type: 3 },
        { piece: '</s>', score: 0, type: 3 },
        { piece: '<0x00>', score: 0, type: 6 },
      ]);
      expect(m.pieces.slice(258, 261)).toEqual([
        { piece: '<0xFF>', score: 0, type: 6 },
        { piece: '▁t', score: -0, type: 1 },
        { piece: 'he', score: -1, type: 1 },
      ]);
      expect(m.trainer).toEqual({
        modelType: 2,
        byteFallback: true,
        treatWhitespaceAsSuffix: false,
        unkId: 0,
        bosId: 1,
        eosId: 2,
        padId: -1,
      });
      expect(m.normalizer).toEqual({
        name: 'identity',
        precompiledCharsmapBytes: 0,
        addDummyPrefix: true,
        removeExtraWhitespaces: true,
        escapeWhitespaces: true,
      });
    },
  );

  it.skipIf(!llama2Tokenizer.path)(`reads Llama 2's tokenizer.model${llama2Tokenizer.skipped}`, async () => {
    const m = await parseModel('llama2-tokenizer', 'tokenizer.model');
    expect(m.pieces).toHaveLength(32000);
    expect(m.pieces[259]).toEqual({ piece: '▁▁', score: -1e9, type: 1 });
    expect(m.pieces[31999]).toEqual({ piece: '给', score: -31740, type: 1 });
    expect(m.normalizer.removeExtraWhitespaces).toBe(false);
  });

  it('decodes negative ids written as 10-byte varints', () => {
    const bytes = [
      ...piece('a', 0, 1),
      ...lengthDelimited(2, [...field(3, 0, varint(2)), ...field(43, 0, varint(-1))]),
    ];
    const m = parseSentencePieceModel(new Uint8Array(bytes));
    expect([m.trainer.modelType, m.trainer.padId]).toEqual([2, -1]);
    expect(m.pieces).toEqual([{ piece: 'a', score: 0, type: 1 }]);
  });

  it('rejects truncated and empty input with STRATA_CONVERT', () => {
    const bytes = piece('abc', -1, 1);
    const cut = thrown(
      () => parseSentencePieceModel(new Uint8Array(bytes.slice(0, 5)), 'x.model'),
      ModelError,
    );
    expect(cut.code).toBe('STRATA_CONVERT');
    expect(cut.message).toMatch(/^x\.model is not a SentencePiece model: truncated at byte \d+/);
    const empty = thrown(() => parseSentencePieceModel(new Uint8Array(), 'y.model'), ModelError);
    expect(empty.message).toBe('y.model is not a SentencePiece model: it has no pieces (field 1)');
  });
});

describe('buildHfTokenizer', () => {
  it.skipIf(!llama2Tokenizer.path || !stories.path)(
    `writes the Llama-style pipeline; whitespace rules only where the model asks for them${llama2Tokenizer.skipped || stories.skipped}`,
    async () => {
      const llama2 = buildHfTokenizer(await parseModel('llama2-tokenizer', 'tokenizer.model'), {
        modelMaxLength: 4096,
      });
      const tok512 = buildHfTokenizer(await parseModel('stories260K', 'tok512.model'), {
        modelMaxLength: 512,
      });
      const prependReplace = [
        { type: 'Prepend', prepend: '▁' },
        { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
      ];
      expect(llama2.tokenizer.normalizer).toEqual({ type: 'Sequence', normalizers: prependReplace });
      expect(tok512.tokenizer.normalizer).toEqual({
        type: 'Sequence',
        normalizers: [
          { type: 'Replace', pattern: { Regex: '^ +| +$' }, content: '' },
          { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' },
          ...prependReplace,
        ],
      });
      expect(llama2.tokenizer.decoder).toEqual({
        type: 'Sequence',
        decoders: [
          { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
          { type: 'ByteFallback' },
          { type: 'Fuse' },
          { type: 'Strip', content: ' ', start: 1, stop: 0 },
        ],
      });
      expect(llama2.tokenizer.model).toMatchObject({
        type: 'BPE',
        byte_fallback: true,
        fuse_unk: true,
        unk_token: '<unk>',
      });
      expect(tok512.tokenizerConfig).toMatchObject({
        add_bos_token: true,
        add_eos_token: false,
        bos_token: '<s>',
        eos_token: '</s>',
        unk_token: '<unk>',
        pad_token: null,
        model_max_length: 512,
      });
    },
  );

  it.skipIf(!stories.path)(`ranks merges by piece score, best first${stories.skipped}`, async () => {
    const { tokenizer } = buildHfTokenizer(await parseModel('stories260K', 'tok512.model'), {
      modelMaxLength: 512,
    });
    const merges = (tokenizer.model as { merges: [string, string][] }).merges;
    // Pieces 259 '▁t' (score 0) and 260 'he' (score -1) are the first two merges SentencePiece learned.
    expect(merges.slice(0, 2)).toEqual([
      ['▁', 't'],
      ['h', 'e'],
    ]);
  });

  it.skipIf(!llama2Tokenizer.path)(
    `encodes like SentencePiece on the Llama 2 vocabulary (golden pairs from sentencepiece)${llama2Tokenizer.skipped}`,
    async () => {
      const golden = (await readJsonFile(
        path.join(import.meta.dirname, 'golden', 'llama2-tokenizer.json'),
      )) as unknown as {
        cases: { text: string; ids: number[] }[];
      };
      const tok = await Tokenizer.load(await convertedLlama2Tokenizer(dirs));
      expect(golden.cases.length).toBeGreaterThanOrEqual(10);
      for (const { text, ids } of golden.cases) {
        expect(await tok.encode(text, { addSpecialTokens: false })).toEqual(ids);
        expect(tok.decode(ids)).toBe(text);
      }
    },
  );

  it('rejects SentencePiece features it cannot express', () => {
    const unigram = parseSentencePieceModel(
      new Uint8Array([...piece('<unk>', 0, 2), ...lengthDelimited(2, field(3, 0, [1]))]),
    );
    const err = thrown(() => buildHfTokenizer(unigram, { modelMaxLength: 8 }), ModelError);
    expect(err.code).toBe('STRATA_CONVERT');
    expect(err.message).toBe(
      'SentencePiece model: model_type 1 (only BPE = 2) is not supported by this converter',
    );
  });
});
