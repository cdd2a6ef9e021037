// The model's tokenizer: Hugging Face `tokenizers` (tokenizer.json, or the equivalent built from a
// GGUF file's metadata) with BOS/EOS added per the model's configs rather than per whatever
// post-processor tokenizer.json happens to carry.
//
// Decoding is synchronous: ids -> token pieces -> tokenizer.json's decoder chain, which is what the
// binding's own (async, thread-pool) decode does. The detokenizer calls it once or twice per engine
// step per sequence, where a thread-pool round trip would cost more than the decode. Special tokens
// are skipped by id here, because the binding compares piece strings, which fails for added tokens
// stored normalized (tinystories-656k's '▁<|start_story|>').

import type { Decoder as HfDecoder, Tokenizer as HfTokenizer } from 'tokenizers';
import tokenizers from 'tokenizers';
import { ModelError } from './errors.js';
import { loadModelFiles, type ModelFiles } from './model-files.js';

export interface EncodeOptions {
  /** Add BOS/EOS as the model's configs say (default true). Off for text that already has them, e.g. a rendered chat template. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Leave special tokens (BOS, EOS, control tokens) out of the text (default true). */
  skipSpecialTokens?: boolean;
}

const BYTE_PIECE = /^<0x[0-9A-Fa-f]{2}>$/;
// Memoized decodes of one- and two-id windows (what streaming detokenization asks for, twice per
// token); cleared when full, so memory stays bounded.
const SHORT_DECODE_CACHE_SIZE = 1 << 16;

export class Tokenizer {
  readonly files: ModelFiles;
  /** Ids the tokenizer knows, added tokens included: valid ids are 0 .. vocabSize-1. */
  readonly vocabSize: number;
  readonly bosTokenId: number | null;
  readonly eosTokenIds: readonly number[];
  readonly specialTokenIds: ReadonlySet<number>;

  readonly #hf: HfTokenizer;
  readonly #decoder: HfDecoder | null;
  /** Piece string per id, filled on first use; undefined = not looked up yet, null = unknown id. */
  readonly #pieces: (string | null | undefined)[];
  /** decode(ids, keep specials) of 1 or 2 ids: key a for [a], vocabSize + a * vocabSize + b for [a, b]. */
  readonly #shortDecodes = new Map<number, string>();

  private constructor(files: ModelFiles, hf: HfTokenizer) {
    this.files = files;
    this.#hf = hf;
    this.#decoder = hf.getDecoder();
    this.vocabSize = hf.getVocabSize(true);
    this.#pieces = new Array<string | null | undefined>(this.vocabSize);
    this.bosTokenId = files.bosTokenId;
    this.eosTokenIds = files.eosTokenIds;
    this.specialTokenIds = new Set(files.specialTokenIds);
  }

  /** Loads the tokenizer of a model: a Hugging Face directory or a GGUF file (see loadModelFiles). */
  static async load(modelPath: string): Promise<Tokenizer> {
    return Tokenizer.fromModelFiles(await loadModelFiles(modelPath));
  }

  static fromModelFiles(files: ModelFiles): Tokenizer {
    const source = files.tokenizer;
    let hf: HfTokenizer;
    try {
      hf =
        source.kind === 'file'
          ? tokenizers.Tokenizer.fromFile(source.path)
          : tokenizers.Tokenizer.fromString(source.json);
    } catch (err) {
      const file = source.kind === 'file' ? source.path : source.origin;
      const what = source.kind === 'file' ? file : `The tokenizer built from ${file}`;
      throw new ModelError('STRATA_MODEL_FILES', `${what} cannot be loaded: ${String(err)}`, {
        file,
        cause: err,
      });
    }
    return new Tokenizer(files, hf);
  }

  async encode(text: string, options: EncodeOptions = {}): Promise<number[]> {
    const encoding = await this.#hf.encode(text, null, { addSpecialTokens: false });
    const ids = encoding.getIds();
    if (options.addSpecialTokens ?? true) {
      const { addBosToken, addEosToken } = this.files;
      if (addBosToken && this.bosTokenId !== null) ids.unshift(this.bosTokenId);
      const eos = this.eosTokenIds[0];
      if (addEosToken && eos !== undefined) ids.push(eos);
    }
    return ids;
  }

  /** Text of `ids`; ids the tokenizer does not know contribute nothing, as in the binding's decode. */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    const skip = options.skipSpecialTokens ?? true;
    if (!skip && (ids.length === 1 || ids.length === 2)) return this.#decodeShort(ids);
    return this.#decodePieces(ids, skip);
  }

  #decodeShort(ids: readonly number[]): string {
    const v = this.vocabSize;
    const [a = -1, b = -1] = ids;
    const valid = (id: number) => Number.isInteger(id) && id >= 0 && id < v;
    if (!valid(a) || (ids.length === 2 && !valid(b))) return this.#decodePieces(ids, false);
    const key = ids.length === 1 ? a : v + a * v + b;
    let text = this.#shortDecodes.get(key);
    if (text === undefined) {
      text = this.#decodePieces(ids, false);
      if (this.#shortDecodes.size >= SHORT_DECODE_CACHE_SIZE) this.#shortDecodes.clear();
      this.#shortDecodes.set(key, text);
    }
    return text;
  }

  #decodePieces(ids: readonly number[], skip: boolean): string {
    const pieces: string[] = [];
    for (const id of ids) {
      if (skip && this.specialTokenIds.has(id)) continue;
      const piece = this.piece(id);
      if (piece !== null) pieces.push(piece);
    }
    return this.#decoder === null ? pieces.join(' ') : this.#decoder.decode(pieces);
  }

  /** The vocabulary entry of `id` before decoding ('▁the', '<0xE2>'), or null for an unknown id. */
  piece(id: number): string | null {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) return null;
    let piece = this.#pieces[id];
    if (piece === undefined) {
      piece = this.#hf.idToToken(id);
      this.#pieces[id] = piece;
    }
    return piece;
  }

  isSpecial(id: number): boolean {
    return this.specialTokenIds.has(id);
  }

  /** Whether `id` is a <0xNN> byte piece that the decoder merges with its neighbours into UTF-8 text. */
  isByteFallback(id: number): boolean {
    if (!this.files.byteFallback) return false;
    const piece = this.piece(id);
    return piece !== null && BYTE_PIECE.test(piece);
  }
}
