// SmolLM2-135M-Instruct (Q4_1 GGUF), the default model: what loadModelFiles reads from it, its
// tokenizer (byte-level BPE with the 'smollm' pre-tokenizer: every digit alone, then GPT-2's
// regex) and its ChatML chat template. Expected ids are derived here, independently of the
// tokenizer: pre-tokenization worked out by hand and each piece looked up in the file's own
// vocabulary. (llama.cpp's own tokenization is to be added as a golden file.)
import { beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate } from '../src/model/chat-template.js';
import { IncrementalDetokenizer } from '../src/model/detokenizer.js';
import { readGguf } from '../src/model/gguf.js';
import { loadModelFiles, type ModelFiles } from '../src/model/model-files.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { byteLevel } from './support/gguf-writer.js';
import { smollm2Gguf } from './support/models.js';

const smol = smollm2Gguf();

const SYSTEM_DEFAULT = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face';

describe.skipIf(!smol.path)(`SmolLM2-135M-Instruct Q4_1 GGUF${smol.skipped}`, () => {
  let files: ModelFiles;
  let tok: Tokenizer;
  /** Vocabulary piece -> id, from the file's tokenizer.ggml.tokens. */
  let vocab: Map<string, number>;
  const v = (piece: string): number => {
    const id = vocab.get(piece);
    if (id === undefined) throw new Error(`${JSON.stringify(piece)} is not in the vocabulary`);
    return id;
  };

  beforeAll(async () => {
    const file = smol.path as string;
    files = await loadModelFiles(file);
    tok = Tokenizer.fromModelFiles(files);
    const tokens = (await readGguf(file)).strings('tokenizer.ggml.tokens', true);
    vocab = new Map(tokens.map((t, i) => [t, i]));
  });

  it('reads the model: llama, 49,152 tokens, ChatML ids, no BOS added, Q4_1', () => {
    const { tokenizer: _json, chatTemplate, ...rest } = files;
    expect(rest).toMatchObject({
      format: 'gguf',
      path: smol.path,
      architectures: ['LlamaForCausalLM'],
      modelType: 'llama',
      vocabSize: 49152,
      bosToken: '<|im_start|>',
      bosTokenId: 1,
      eosToken: '<|im_end|>',
      eosTokenIds: [2],
      addBosToken: false,
      addEosToken: false,
      specialTokenIds: Array.from({ length: 17 }, (_, i) => i),
      byteFallback: false,
      maxModelLen: 8192,
      quantization: 'Q4_1',
      tensorTypes: { F32: 61, Q4_1: 210, Q8_0: 1 },
    });
    expect(files.displayName).toMatch(/^Smollm2 135M/);
    expect(chatTemplate).toContain("'<|im_start|>' + message['role']");
    expect(tok.vocabSize).toBe(49152);
  });

  it('encodes words as the vocabulary pieces GPT-2 pre-tokenization gives', async () => {
    const cases: [string, string[]][] = [
      ['Hello world', ['Hello', 'Ġworld']],
      ['The year', ['The', 'Ġyear']],
      // Whitespace: a run before a word leaves its last space to the word.
      ['a   b', ['a', 'ĠĠ', 'Ġb']],
      ['a    b', ['a', 'ĠĠĠ', 'Ġb']],
      // Newlines before a letter split one by one; at the end of the text they stay one piece.
      ['line\n\nnext', ['line', 'Ċ', 'Ċ', 'next']],
      ['line\n\n', ['line', 'ĊĊ']],
    ];
    for (const [text, pieces] of cases) {
      expect(await tok.encode(text), JSON.stringify(text)).toEqual(pieces.map(v));
    }
  });

  it('splits digits one per token', async () => {
    expect(await tok.encode('2024')).toEqual(['2', '0', '2', '4'].map(v));
    expect(await tok.encode('in 1999.')).toEqual(['in', 'Ġ', '1', '9', '9', '9', '.'].map(v));
    const ids = await tok.encode('pi is 3.14159265 and e is 2.71828');
    const digits = ids.map((id) => tok.piece(id) ?? '').filter((p) => /\d/.test(p));
    expect(digits).toEqual([...'314159265271828']);
  });

  it('writes every text as its UTF-8 bytes in byte-level pieces, and decodes it back', async () => {
    const texts = [
      'héllo wörld',
      '日本語のテキスト',
      'emoji 😀 👍🏽 🇺🇸 ❤️',
      '  leading, trailing  ',
      'tabs\tand\r\nCRLF',
      "I'm sure they'll say it's fine",
      'def f(x):\n    return x ** 2  # comment',
      'ÀÉÎÕÜ ñ Ω ∑ → ∞',
      '',
    ];
    for (const text of texts) {
      const ids = await tok.encode(text);
      expect(ids.map((id) => tok.piece(id)).join(''), JSON.stringify(text)).toBe(byteLevel(text));
      expect(tok.decode(ids), JSON.stringify(text)).toBe(text);
    }
    // '😀' is F0 9F 98 80: bytes, not characters, are the BPE's alphabet.
    expect(byteLevel('😀')).toBe('ðŁĺĢ');
  });

  it('streams text token by token without broken characters, as decode() gives it', async () => {
    for (const text of [
      'Sure! 😀👍🏽 is "thumbs up" — 日本語 too.',
      'x = 12345;\n\treturn x',
      'naïve café<|im_end|>',
    ]) {
      const ids = await tok.encode(text);
      const detok = new IncrementalDetokenizer(tok);
      const deltas = ids.map((id) => detok.push([id]));
      deltas.push(detok.finish());
      expect(deltas.join(''), JSON.stringify(text)).toBe(tok.decode(ids));
      expect(deltas.some((d) => d.includes('\uFFFD'))).toBe(false);
    }
  });

  it('recognises <|im_start|> and <|im_end|> in text; decoding drops them unless asked', async () => {
    const ids = await tok.encode('<|im_start|>user\nHi<|im_end|>\n');
    expect(ids).toEqual([1, v('user'), v('Ċ'), v('Hi'), 2, v('Ċ')]);
    expect(await tok.encode('x<|im_end|>y')).toEqual([v('x'), 2, v('y')]);
    expect(tok.decode(ids)).toBe('user\nHi\n');
    expect(tok.decode(ids, { skipSpecialTokens: false })).toBe('<|im_start|>user\nHi<|im_end|>\n');
    // A near miss is plain text.
    expect(await tok.encode('<|im_end|')).not.toContain(2);
  });

  it("renders SmolLM2's ChatML template with the generation prompt", async () => {
    const template = ChatTemplate.fromModelFiles(files);
    const text = template.render([{ role: 'user', content: 'What is 2+2?' }]);
    expect(text).toBe(
      `<|im_start|>system\n${SYSTEM_DEFAULT}<|im_end|>\n` +
        '<|im_start|>user\nWhat is 2+2?<|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
    expect(
      template.render(
        [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hi' },
          { role: 'assistant', content: 'Hello!' },
        ],
        { addGenerationPrompt: false },
      ),
    ).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n',
    );

    // As a chat prompt: the turn markers are single tokens; nothing is added before or after.
    const ids = await tok.encode(text);
    expect(ids[0]).toBe(1);
    expect(ids.filter((id) => id === 1)).toHaveLength(3);
    expect(ids.filter((id) => id === 2)).toHaveLength(2);
    expect(ids.at(-1)).toBe(v('Ċ'));
    expect(tok.decode(ids.slice(ids.lastIndexOf(1)), { skipSpecialTokens: false })).toBe(
      '<|im_start|>assistant\n',
    );
  });
});
