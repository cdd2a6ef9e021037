// ModelFiles and the tokenizer from a GGUF file: hand-built files (a small byte-level BPE
// vocabulary under each pre-tokenizer, and broken or unsupported metadata), then the real
// tinystories-656k GGUF against the same model's Hugging Face tokenizer.json.
import { copyFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { seededRandom } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate } from '../src/model/chat-template.js';
import { ModelError } from '../src/model/errors.js';
import { loadModelFiles } from '../src/model/model-files.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import {
  byteLevelChars,
  ggufBytes,
  int32s,
  type Kv,
  strings,
  type TensorSpec,
} from './support/gguf-writer.js';
import { optionalModel } from './support/models.js';
import { copyTinystories, TempDirs, TINYSTORIES_FILES } from './support/temp-model.js';
import { rejected, thrown } from './support/thrown.js';

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

const CONTROL = 3;
const USER_DEFINED = 4;
const NORMAL = 1;

// A byte-level BPE vocabulary: 3 control tokens, one user-defined token, the 256 byte characters,
// then the merged pieces (in merge order).
const SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
const USER = '<tool>';
const MERGES = ['h e', 'l l', 'he ll', 'hell o', 'Ġ w', 'o r', 'Ġw or', 'l d', 'Ġwor ld', '1 2', '3 4'];
const TOKENS = [...SPECIALS, USER, ...byteLevelChars(), ...MERGES.map((m) => m.replace(' ', ''))];
const TYPES = TOKENS.map((_, id) => (id < 3 ? CONTROL : id === 3 ? USER_DEFINED : NORMAL));
const id = (token: string): number => {
  const i = TOKENS.indexOf(token);
  if (i < 0) throw new Error(`no token ${token}`);
  return i;
};
const CHATML = String.raw`{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`;

const TENSORS: TensorSpec[] = [
  { name: 'token_embd.weight', dims: [64, TOKENS.length], type: 8, bytes: 2 * 34 * TOKENS.length }, // Q8_0
  { name: 'blk.0.attn_q.weight', dims: [64, 64], type: 3, bytes: 2 * 20 * 64 }, // Q4_1
  { name: 'output_norm.weight', dims: [64], type: 0, bytes: 256 }, // F32
];

/** The metadata of a small llama model with the byte-level vocabulary; `edit` changes keys (undefined removes one). */
function smallModel(edit: Record<string, [Kv[1], unknown] | undefined> = {}): Kv[] {
  const kvs: Record<string, [Kv[1], unknown]> = {
    'general.architecture': ['string', 'llama'],
    'general.name': ['string', 'Small Test'],
    'llama.context_length': ['uint32', 128],
    'tokenizer.ggml.model': ['string', 'gpt2'],
    'tokenizer.ggml.pre': ['string', 'smollm'],
    'tokenizer.ggml.tokens': ['array', strings(TOKENS)],
    'tokenizer.ggml.token_type': ['array', int32s(TYPES)],
    'tokenizer.ggml.merges': ['array', strings(MERGES)],
    'tokenizer.ggml.bos_token_id': ['uint32', 1],
    'tokenizer.ggml.eos_token_id': ['uint32', 2],
    'tokenizer.ggml.add_bos_token': ['bool', false],
    'tokenizer.chat_template': ['string', CHATML],
  };
  for (const [key, value] of Object.entries(edit)) {
    if (value === undefined) delete kvs[key];
    else kvs[key] = value;
  }
  return Object.entries(kvs).map(([key, [type, value]]) => [key, type, value]);
}

async function ggufFile(kvs: Kv[], name = 'small-test.Q8_0.gguf'): Promise<string> {
  const file = path.join(await dirs.make('strata-gguf-model-'), name);
  await writeFile(file, ggufBytes(kvs, TENSORS));
  return file;
}

/** The ModelError `promise` rejects with (fails the test if it resolves or throws something else). */
const modelError = (promise: Promise<unknown>) => rejected(promise, ModelError);

describe('loadModelFiles on a hand-built GGUF file', () => {
  it('reads the model, special tokens, flags, template and quantization from the metadata', async () => {
    const file = await ggufFile(smallModel());
    const files = await loadModelFiles(file);
    expect(files).toMatchObject({
      format: 'gguf',
      path: file,
      dir: path.dirname(file),
      architectures: ['LlamaForCausalLM'],
      modelType: 'llama',
      // No llama.vocab_size: the embedding's rows.
      vocabSize: TOKENS.length,
      bosToken: '<|im_start|>',
      bosTokenId: 1,
      eosToken: '<|im_end|>',
      eosTokenIds: [2],
      addBosToken: false,
      addEosToken: false,
      // CONTROL tokens only: the USER_DEFINED <tool> is an added token kept in decoded text.
      specialTokenIds: [0, 1, 2],
      byteFallback: false,
      chatTemplate: CHATML,
      chatTemplateOrigin: `${file} tokenizer.chat_template`,
      maxModelLen: 128,
      displayName: 'Small Test',
      // No general.file_type: the type of most weight elements (the Q8_0 embedding).
      quantization: 'Q8_0',
      tensorTypes: { Q8_0: 1, Q4_1: 1, F32: 1 },
    });
    expect(files.tokenizer.kind).toBe('json');
  });

  it('names the quantization from general.file_type when the file has one', async () => {
    const files = await loadModelFiles(await ggufFile(smallModel({ 'general.file_type': ['uint32', 15] })));
    expect(files.quantization).toBe('Q4_K_M');
  });

  it('adds eot and eom ids to the end-of-generation ids, once each', async () => {
    const files = await loadModelFiles(
      await ggufFile(
        smallModel({
          'tokenizer.ggml.eot_token_id': ['uint32', 0],
          'tokenizer.ggml.eom_token_id': ['uint32', 2],
        }),
      ),
    );
    expect(files.eosTokenIds).toEqual([2, 0]);
    expect(files.eosToken).toBe('<|im_end|>');
  });

  it('finds the one .gguf file of a directory without config.json', async () => {
    const file = await ggufFile(smallModel());
    const files = await loadModelFiles(path.dirname(file));
    expect([files.format, files.path]).toEqual(['gguf', file]);
  });

  it('refuses a directory with two .gguf files, naming them', async () => {
    const file = await ggufFile(smallModel());
    await copyFile(file, path.join(path.dirname(file), 'other.gguf'));
    const err = await modelError(loadModelFiles(path.dirname(file)));
    expect(err.message).toBe(
      `${path.dirname(file)} holds 2 .gguf files (other.gguf, small-test.Q8_0.gguf) and no config.json; name the one to serve`,
    );
  });

  const hf = optionalModel('tinystories-656k');
  it.skipIf(!hf.path)(
    `reads a directory with config.json as a Hugging Face model even when a .gguf file is beside it${hf.skipped}`,
    async () => {
      const dir = await copyTinystories(dirs);
      await writeFile(path.join(dir, 'stray.gguf'), ggufBytes(smallModel(), TENSORS));
      expect((await loadModelFiles(dir)).format).toBe('huggingface');
    },
  );

  it('says a chat request needs a template when the file has none', async () => {
    const file = await ggufFile(smallModel({ 'tokenizer.chat_template': undefined }));
    const files = await loadModelFiles(file);
    expect([files.chatTemplate, files.chatTemplateOrigin]).toEqual([null, null]);
    const err = thrown(() => ChatTemplate.fromModelFiles(files, '"small"'), ModelError);
    expect(err).toMatchObject({
      code: 'STRATA_NO_CHAT_TEMPLATE',
      file,
      field: 'tokenizer.chat_template',
      message:
        'The model "small" has no chat template (its GGUF file has no tokenizer.chat_template); ' +
        'use /v1/completions with a plain prompt instead',
    });
  });

  it('names the GGUF file when the tokenizer built from it does not load', async () => {
    const files = await loadModelFiles(await ggufFile(smallModel()));
    const broken = {
      ...files,
      tokenizer: { kind: 'json' as const, json: '{"model": {}}', origin: files.path },
    };
    const err = thrown(() => Tokenizer.fromModelFiles(broken), ModelError);
    expect(err).toMatchObject({ code: 'STRATA_MODEL_FILES', file: files.path });
    expect(err.message).toMatch(new RegExp(`^The tokenizer built from ${files.path} cannot be loaded: `));
  });

  it('refuses a file that is not named .gguf', async () => {
    const file = await ggufFile(smallModel(), 'model.bin');
    const err = await modelError(loadModelFiles(file));
    expect(err.message).toBe(
      `${file} is a file but not a .gguf file; give a .gguf file or a model directory`,
    );
  });
});

describe('GGUF metadata the backend refuses, each with a clear error', () => {
  const cases: [string, Record<string, [Kv[1], unknown] | undefined>, string, RegExp][] = [
    [
      'an architecture other than llama',
      { 'general.architecture': ['string', 'qwen2'] },
      'general.architecture',
      /GGUF key "general.architecture" is "qwen2"; this backend serves only llama models$/,
    ],
    [
      'an unknown tokenizer model',
      { 'tokenizer.ggml.model': ['string', 'bert'] },
      'tokenizer.ggml.model',
      /"tokenizer.ggml.model" is "bert", a tokenizer model this backend does not support \(supported: gpt2, llama\)$/,
    ],
    [
      'an unknown pre-tokenizer',
      { 'tokenizer.ggml.pre': ['string', 'qwen2'] },
      'tokenizer.ggml.pre',
      /"tokenizer.ggml.pre" is "qwen2", a pre-tokenizer this backend does not support \(supported: default, smollm, gpt-2, llama3, /,
    ],
    [
      'a BOS id outside the vocabulary',
      { 'tokenizer.ggml.bos_token_id': ['uint32', 5000] },
      'tokenizer.ggml.bos_token_id',
      /"tokenizer.ggml.bos_token_id" is 5000, outside the vocabulary \(271 tokens\)$/,
    ],
    [
      'token types that do not match the tokens',
      { 'tokenizer.ggml.token_type': ['array', int32s([1, 1])] },
      'tokenizer.ggml.token_type',
      /"tokenizer.ggml.token_type" has 2 entries for 271 tokens/,
    ],
    [
      'no tokens',
      { 'tokenizer.ggml.tokens': undefined },
      'tokenizer.ggml.tokens',
      /"tokenizer.ggml.tokens" is missing$/,
    ],
    [
      'no merges',
      { 'tokenizer.ggml.merges': undefined },
      'tokenizer.ggml.merges',
      /"tokenizer.ggml.merges" is missing$/,
    ],
    [
      'a merge without a space',
      { 'tokenizer.ggml.merges': ['array', strings(['h e', 'll'])] },
      'tokenizer.ggml.merges',
      /entry 1 \("ll"\) is not "left right"$/,
    ],
    [
      'a token listed twice',
      { 'tokenizer.ggml.tokens': ['array', strings([...TOKENS.slice(0, -1), 'he'])] },
      'tokenizer.ggml.tokens',
      /holds "he" twice \(ids 260 and 270\)$/,
    ],
    [
      'add_bos_token without a BOS id',
      { 'tokenizer.ggml.bos_token_id': undefined, 'tokenizer.ggml.add_bos_token': ['bool', true] },
      'tokenizer.ggml.bos_token_id',
      /is missing but BOS is added to every prompt$/,
    ],
    [
      'a key of the wrong type',
      { 'tokenizer.ggml.eos_token_id': ['string', '2'] },
      'tokenizer.ggml.eos_token_id',
      /should be a non-negative integer, not string$/,
    ],
  ];
  for (const [what, edit, field, message] of cases) {
    it(`refuses ${what}`, async () => {
      const file = await ggufFile(smallModel(edit));
      const err = await modelError(loadModelFiles(file));
      expect([err.code, err.file, err.field]).toEqual(['STRATA_MODEL_FILES', file, field]);
      expect(err.message.startsWith(`${file}: `)).toBe(true);
      expect(err.message).toMatch(message);
    });
  }
});

describe('the byte-level BPE tokenizer built from GGUF metadata', () => {
  const tokenizerWith = async (edit: Record<string, [Kv[1], unknown] | undefined> = {}) =>
    Tokenizer.load(await ggufFile(smallModel(edit)));
  let tok: Tokenizer;
  beforeAll(async () => {
    tok = await tokenizerWith();
  });

  it('encodes with the merges, in merge order', async () => {
    expect(await tok.encode('hello world')).toEqual([id('hello'), id('Ġworld')]);
    expect(await tok.encode('hell')).toEqual([id('hell')]);
    expect(await tok.encode('held')).toEqual([id('he'), id('ld')]);
    expect(await tok.encode('helm')).toEqual([id('he'), id('l'), id('m')]);
  });

  it('splits digits one per token under smollm, and as each pre-tokenizer says otherwise', async () => {
    const digits = ['1', '2', '3', '4'].map(id);
    expect(await tok.encode('1234')).toEqual(digits);
    // gpt-2: one number piece, merged by rank ('1 2' and '3 4').
    const gpt2 = await tokenizerWith({ 'tokenizer.ggml.pre': ['string', 'gpt-2'] });
    expect(await gpt2.encode('1234')).toEqual([id('12'), id('34')]);
    // llama.cpp's default chain (also when the file names no pre-tokenizer): ...[0-9]{3} last.
    for (const pre of [
      { 'tokenizer.ggml.pre': ['string', 'default'] as [Kv[1], unknown] },
      { 'tokenizer.ggml.pre': undefined },
    ]) {
      const def = await tokenizerWith(pre);
      expect(await def.encode('1234')).toEqual([id('12'), id('3'), id('4')]);
    }
    // llama3: \p{N}{1,3} pieces, and BOS added unless the file says otherwise.
    const llama3 = await tokenizerWith({
      'tokenizer.ggml.pre': ['string', 'llama3'],
      'tokenizer.ggml.add_bos_token': undefined,
    });
    expect(llama3.files.addBosToken).toBe(true);
    expect(await llama3.encode('1234')).toEqual([1, id('12'), id('3'), id('4')]);
  });

  it('encodes text outside the merges byte by byte and decodes it back', async () => {
    for (const text of ['héllo 😀', '  two  spaces\n\ttab', '日本語', 'a\u00a0b', '']) {
      const ids = await tok.encode(text);
      expect(ids.every((i) => i >= 4 && i < TOKENS.length)).toBe(true);
      expect(tok.decode(ids), JSON.stringify(text)).toBe(text);
    }
    expect(await tok.encode('é')).toEqual([id('Ã'), id('©')]);
  });

  it('recognises control and user-defined tokens in raw text; decoding keeps only the user-defined ones', async () => {
    const ids = await tok.encode('<|im_start|>user\nhello<tool>world<|im_end|>');
    expect(ids).toEqual([
      1,
      id('u'),
      id('s'),
      id('e'),
      id('r'),
      id('Ċ'),
      id('hello'),
      3,
      id('w'),
      id('or'),
      id('ld'),
      2,
    ]);
    expect(tok.decode(ids)).toBe('user\nhello<tool>world');
    expect(tok.decode(ids, { skipSpecialTokens: false })).toBe(
      '<|im_start|>user\nhello<tool>world<|im_end|>',
    );
    expect([1, 2, 3].map((i) => tok.isSpecial(i))).toEqual([true, true, false]);
  });
});

const tinyGguf = optionalModel('tinystories-656k-gguf/tinystories-656k-f32.gguf');
const tinyHf = optionalModel('tinystories-656k');

describe.skipIf(!tinyGguf.path)(`loadModelFiles on tinystories-656k-f32.gguf${tinyGguf.skipped}`, () => {
  it('reads the llama (SentencePiece) model as its Hugging Face twin describes it', async () => {
    const file = tinyGguf.path as string;
    const files = await loadModelFiles(file);
    const { tokenizer, ...rest } = files;
    expect(tokenizer).toMatchObject({ kind: 'json', origin: file });
    expect(rest).toEqual({
      format: 'gguf',
      path: file,
      dir: path.dirname(file),
      ...TINYSTORIES_FILES,
      // No <0xNN> pieces in this vocabulary.
      byteFallback: false,
      displayName: 'tinystories-656k',
      quantization: 'F32',
      tensorTypes: { F32: 20 },
    });
    // Its directory holds just this file: the same model.
    expect((await loadModelFiles(path.dirname(file))).path).toBe(file);
  });
});

// Text the two tokenizers must agree on: words, punctuation, digits, whitespace runs, unicode.
const WORDS = [
  'Once',
  'upon',
  'a',
  'time',
  'there',
  'was',
  'little',
  'girl',
  'named',
  'Lily',
  'She',
  'loved',
  "didn't",
  "it's",
  'Tom',
  'said,',
  '"Hello!"',
  'big',
  'tree.',
  'café',
  'naïve',
  '日本',
  '😀',
  '👍🏽',
  '123',
  '4567',
  '3.14',
  '\n',
  '\n\n',
  '\t',
  '  ',
  '   ',
  'ñ',
  'Ω',
  '-',
  '(x)',
  'ABC',
  'zzz',
];
function variedTexts(): string[] {
  const rand = seededRandom(5);
  const texts = [
    'Once upon a time, there was a cat.',
    ' leading space',
    'trailing space ',
    'a  b   c    d',
    'line one\nline two\n\nthree',
    'Tabs\tand\tspaces \t mixed',
    'émoji 😀 and 👍🏽 and 🇺🇸',
    'Numbers 12345 and 3.14159 and 1,000,000',
    'Ünïcödé ñ Ω 日本語のテキスト',
    '',
    ' ',
    '\n',
  ];
  for (let i = 0; i < 600; i += 1) {
    const n = 1 + Math.floor(rand() * 16);
    const words = Array.from({ length: n }, () => WORDS[Math.floor(rand() * WORDS.length)] as string);
    texts.push(words.join(rand() < 0.8 ? ' ' : ''));
  }
  return texts;
}

describe.skipIf(!tinyGguf.path || !tinyHf.path)(
  `tinystories-656k: the GGUF tokenizer against tokenizer.json${tinyGguf.skipped || tinyHf.skipped}`,
  () => {
    let fromGguf: Tokenizer;
    let fromJson: Tokenizer;
    beforeAll(async () => {
      fromGguf = await Tokenizer.load(tinyGguf.path as string);
      fromJson = await Tokenizer.load(tinyHf.path as string);
    });

    it('encodes a varied text set identically (BOS added by both)', async () => {
      for (const text of variedTexts()) {
        const ids = await fromJson.encode(text);
        expect(await fromGguf.encode(text), JSON.stringify(text)).toEqual(ids);
        expect(fromGguf.decode(ids), JSON.stringify(text)).toBe(fromJson.decode(ids));
      }
    });

    it('decodes random id sequences identically', () => {
      const rand = seededRandom(9);
      for (let n = 0; n < 500; n += 1) {
        const ids = Array.from({ length: 1 + Math.floor(rand() * 12) }, () => Math.floor(rand() * 2048));
        expect(fromGguf.decode(ids), `ids ${ids}`).toBe(fromJson.decode(ids));
        // Special tokens kept: the same where none is in the sequence (tokenizer.json stores its
        // added tokens normalized, '▁<|end_story|>', so kept ones differ by that space).
        const plain = ids.map((i) => Math.max(3, i));
        expect(fromGguf.decode(plain, { skipSpecialTokens: false })).toBe(
          fromJson.decode(plain, { skipSpecialTokens: false }),
        );
      }
    });

    it('recognises its special tokens anywhere in raw text, as llama.cpp does', async () => {
      const ids = await fromGguf.encode('<|start_story|>Hi.<|end_story|>', { addSpecialTokens: false });
      expect(ids[0]).toBe(1);
      expect(ids.at(-1)).toBe(2);
      // The decoder drops the space SentencePiece prefixes to the text, as for text without BOS.
      expect(fromGguf.decode(ids)).toBe('Hi.');
    });
  },
);
