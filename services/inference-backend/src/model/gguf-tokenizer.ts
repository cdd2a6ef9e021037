// The tokenizer a GGUF file describes (tokenizer.ggml.*), rebuilt as a Hugging Face tokenizer.json
// so that the `tokenizers` library does the encoding and decoding. Two tokenizer models:
//
//   gpt2   byte-level BPE: tokens + merges, and a pre-tokenizer chosen by tokenizer.ggml.pre as
//          llama.cpp chooses its split regexes (src/llama-vocab.cpp). Each one is written the way
//          the original model's tokenizer.json writes it, e.g. SmolLM2 ('smollm'): Digits with
//          individual digits, then ByteLevel with GPT-2's regex.
//   llama  SentencePiece-style BPE with byte fallback: tokens + scores + token types, converted as
//          transformers' LlamaConverter does (merges ranked by piece score; src/convert/hf-tokenizer.ts).
//
// Added tokens: CONTROL (and UNKNOWN) tokens are special ones; USER_DEFINED tokens are added
// tokens that are not special (kept in decoded text). All are matched in raw text, before
// normalization, as llama.cpp matches them.

import { buildHfTokenizer } from '../convert/hf-tokenizer.js';
import { ModelType, PieceType, type SentencePiece } from '../convert/sentencepiece-model.js';
import { ModelError } from './errors.js';
import type { GgufFile } from './gguf.js';

/** llama.cpp's token types (gguf-py TokenType): SentencePiece's piece types, value for value. */
export const TokenType = PieceType;

export interface GgufTokenizer {
  /** tokenizer.json text for Tokenizer.fromString. */
  json: string;
  /** tokenizer.ggml.model: 'gpt2' or 'llama'. */
  model: string;
  /** tokenizer.ggml.pre for gpt2 (or 'default' when the file names none); null for llama. */
  pre: string | null;
  tokens: readonly string[];
  /** Token type per id (TokenType). */
  tokenTypes: readonly number[];
  /** Whether encoding adds BOS when the file does not say (tokenizer.ggml.add_bos_token). */
  defaultAddBos: boolean;
  /** Whether <0xNN> byte tokens stand for raw bytes (the decoder fuses runs of them into UTF-8). */
  byteFallback: boolean;
}

const byteLevel = (useRegex: boolean) => ({
  type: 'ByteLevel',
  add_prefix_space: false,
  trim_offsets: true,
  use_regex: useRegex,
});
const split = (regex: string) => ({
  type: 'Split',
  pattern: { Regex: regex },
  behavior: 'Isolated',
  invert: false,
});
const sequence = (...pretokenizers: Record<string, unknown>[]) => ({ type: 'Sequence', pretokenizers });

interface PreTokenizer {
  preTokenizer: Record<string, unknown>;
  /** BPE ignore_merges: a word that is a whole vocabulary entry is one token (Llama 3). */
  ignoreMerges: boolean;
  /** llama.cpp's add_bos default for this pre-tokenizer (the file's add_bos_token overrides it). */
  addBos: boolean;
}

// Llama 3's split regex, as its tokenizer.json writes it (llama.cpp's is an equivalent rewrite).
const LLAMA3_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// llama.cpp's fallback chain (LLAMA_VOCAB_PRE_TYPE_DEFAULT): four regexes applied one after the
// other, each splitting the pieces of the previous one, matches and the text between them kept.
const DEFAULT_REGEXES = [
  '[\\p{P}\\$\\+<=>\\^~\\|]+',
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
  '\\p{N}+',
  '[0-9][0-9][0-9]',
];

const DEFAULT_PRE: PreTokenizer = {
  preTokenizer: sequence(...DEFAULT_REGEXES.map(split), byteLevel(false)),
  ignoreMerges: false,
  addBos: false,
};
const LLAMA3_PRE: PreTokenizer = {
  preTokenizer: sequence(split(LLAMA3_REGEX), byteLevel(false)),
  ignoreMerges: true,
  addBos: true,
};

/** tokenizer.ggml.pre values served, with the pre-tokenizer each one means (llama.cpp's names). */
const PRE_TOKENIZERS: ReadonlyMap<string, PreTokenizer> = new Map([
  ['default', DEFAULT_PRE],
  // SmolLM/SmolLM2 (and StarCoder's family): every digit alone, then GPT-2's regex.
  [
    'smollm',
    {
      preTokenizer: sequence({ type: 'Digits', individual_digits: true }, byteLevel(true)),
      ignoreMerges: false,
      addBos: false,
    },
  ],
  ['gpt-2', { preTokenizer: byteLevel(true), ignoreMerges: false, addBos: false }],
  ['llama3', LLAMA3_PRE],
  ['llama-v3', LLAMA3_PRE],
  ['llama-bpe', LLAMA3_PRE],
]);

/** The tokenizer.ggml.pre values this backend can serve. */
export const SUPPORTED_PRE_TOKENIZERS: readonly string[] = [...PRE_TOKENIZERS.keys()];

/** Builds the tokenizer of `gguf`; throws ModelError STRATA_MODEL_FILES for a missing, malformed or unsupported one. */
export function ggufTokenizer(gguf: GgufFile): GgufTokenizer {
  const model = gguf.string('tokenizer.ggml.model', true);
  const tokens = gguf.strings('tokenizer.ggml.tokens', true);
  if (tokens.length === 0) throw gguf.error('tokenizer.ggml.tokens', 'is empty');
  const tokenTypes = gguf.numbers('tokenizer.ggml.token_type') ?? tokens.map(() => TokenType.NORMAL);
  if (tokenTypes.length !== tokens.length) {
    throw gguf.error(
      'tokenizer.ggml.token_type',
      `has ${tokenTypes.length} entries for ${tokens.length} tokens (tokenizer.ggml.tokens)`,
    );
  }
  if (model === 'gpt2') return gpt2Tokenizer(gguf, tokens, tokenTypes);
  if (model === 'llama') return llamaTokenizer(gguf, tokens, tokenTypes);
  throw gguf.error(
    'tokenizer.ggml.model',
    `is "${model}", a tokenizer model this backend does not support (supported: gpt2, llama)`,
  );
}

function gpt2Tokenizer(gguf: GgufFile, tokens: readonly string[], types: readonly number[]): GgufTokenizer {
  const preName = gguf.string('tokenizer.ggml.pre') ?? 'default';
  const pre = PRE_TOKENIZERS.get(preName);
  if (pre === undefined) {
    throw gguf.error(
      'tokenizer.ggml.pre',
      `is "${preName}", a pre-tokenizer this backend does not support (supported: ${SUPPORTED_PRE_TOKENIZERS.join(', ')})`,
    );
  }
  const vocab = new Map<string, number>();
  tokens.forEach((token, id) => {
    const first = vocab.get(token);
    if (first !== undefined) {
      throw gguf.error(
        'tokenizer.ggml.tokens',
        `holds ${JSON.stringify(token)} twice (ids ${first} and ${id})`,
      );
    }
    vocab.set(token, id);
  });
  const merges = gguf.strings('tokenizer.ggml.merges', true).map((merge, i): [string, string] => {
    // A merge is "left right"; a left part may itself start with a space, so search from index 1.
    const at = merge.indexOf(' ', 1);
    if (at < 0)
      throw gguf.error('tokenizer.ggml.merges', `entry ${i} (${JSON.stringify(merge)}) is not "left right"`);
    return [merge.slice(0, at), merge.slice(at + 1)];
  });
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens(tokens, types),
    normalizer: null,
    pre_tokenizer: pre.preTokenizer,
    // BOS/EOS are added by Tokenizer.encode per the model's flags, never by a post-processor.
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: pre.ignoreMerges,
      // fromEntries defines own properties, so a token named "__proto__" stays a token.
      vocab: Object.fromEntries(vocab),
      merges,
    },
  };
  return {
    json: JSON.stringify(tokenizer),
    model: 'gpt2',
    pre: preName,
    tokens,
    tokenTypes: types,
    defaultAddBos: pre.addBos,
    byteFallback: false,
  };
}

function addedTokens(tokens: readonly string[], types: readonly number[]): Record<string, unknown>[] {
  const added: Record<string, unknown>[] = [];
  types.forEach((type, id) => {
    if (type !== TokenType.CONTROL && type !== TokenType.USER_DEFINED && type !== TokenType.UNKNOWN) return;
    added.push({
      id,
      content: tokens[id],
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: type !== TokenType.USER_DEFINED,
    });
  });
  return added;
}

const TOKEN_TYPES: ReadonlySet<number> = new Set(Object.values(TokenType));

function llamaTokenizer(gguf: GgufFile, tokens: readonly string[], types: readonly number[]): GgufTokenizer {
  const scores = gguf.numbers('tokenizer.ggml.scores');
  if (scores === null) {
    throw gguf.error(
      'tokenizer.ggml.scores',
      'is missing; a SentencePiece (llama) vocabulary needs its scores',
    );
  }
  if (scores.length !== tokens.length) {
    throw gguf.error('tokenizer.ggml.scores', `has ${scores.length} entries for ${tokens.length} tokens`);
  }
  const pieces: SentencePiece[] = tokens.map((piece, id) => {
    const type = types[id] as number;
    if (!TOKEN_TYPES.has(type)) {
      throw gguf.error('tokenizer.ggml.token_type', `entry ${id} is ${type}, not a token type (1..6)`);
    }
    return { piece, score: scores[id] as number, type: type as SentencePiece['type'] };
  });
  const unkId = gguf.uint('tokenizer.ggml.unknown_token_id') ?? types.indexOf(TokenType.UNKNOWN);
  const byteFallback = types.includes(TokenType.BYTE);
  let tokenizer: Record<string, unknown>;
  try {
    ({ tokenizer } = buildHfTokenizer(
      {
        pieces,
        trainer: {
          modelType: ModelType.BPE,
          byteFallback,
          treatWhitespaceAsSuffix: false,
          unkId,
          bosId: gguf.uint('tokenizer.ggml.bos_token_id') ?? -1,
          eosId: gguf.uint('tokenizer.ggml.eos_token_id') ?? -1,
          padId: gguf.uint('tokenizer.ggml.padding_token_id') ?? -1,
        },
        normalizer: {
          name: 'identity',
          precompiledCharsmapBytes: 0,
          addDummyPrefix: gguf.bool('tokenizer.ggml.add_space_prefix') ?? true,
          removeExtraWhitespaces: gguf.bool('tokenizer.ggml.remove_extra_whitespaces') ?? false,
          escapeWhitespaces: true,
        },
      },
      { modelMaxLength: 0 },
    ));
  } catch (err) {
    if (!(err instanceof ModelError)) throw err;
    throw new ModelError(
      'STRATA_MODEL_FILES',
      `${gguf.file}: its llama (SentencePiece) tokenizer cannot be built: ${err.message}`,
      { file: gguf.file, field: 'tokenizer.ggml.tokens', cause: err },
    );
  }
  // BOS/EOS are added by Tokenizer.encode per the model's flags, never by a post-processor.
  tokenizer.post_processor = null;
  return {
    json: JSON.stringify(tokenizer),
    model: 'llama',
    pre: null,
    tokens,
    tokenTypes: types,
    defaultAddBos: true,
    byteFallback,
  };
}
