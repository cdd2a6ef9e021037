// The model's tokenizer: Hugging Face `tokenizers` (tokenizer.json, or the equivalent built from a
// GGUF file's metadata) with BOS/EOS added per the model's configs rather than per whatever
// post-processor tokenizer.json happens to carry.
//
// Decoding is synchronous: ids -> token pieces -> tokenizer.json's decoder chain, which is what the
// binding's own (async, thread-pool) decode does. The detokenizer calls it once or twice per engine
// step per sequence, where a thread-pool round trip would cost more than the decode. Special tokens
// are skipped by id here, because the binding compares piece strings, which fails for added tokens
// stored normalized (tinystories-656k's '▁<|start_story|>').
//
// Encoding runs in a worker thread once startWorker() (Tokenizer.open) has started one
// (encoder-worker.ts): a long prompt then costs the event loop nothing per token, and a short one
// about 0.04 ms more than encoding here (docs/reliability.md). byteBound (token-bytes.ts) bounds
// the bytes of text one token covers, so that a prompt can be judged too long by its size.

import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { Decoder as HfDecoder, Tokenizer as HfTokenizer } from 'tokenizers';
import tokenizers from 'tokenizers';
import { EncoderWorker } from './encoder-worker.js';
import { ModelError } from './errors.js';
import { loadModelFiles, type ModelFiles, type TokenizerSource } from './model-files.js';
import { type TokenByteBound, tokenByteBound } from './token-bytes.js';

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

export interface OpenOptions {
  /** Encode in a worker thread (default true; Tokenizer.load: false). */
  worker?: boolean;
}

export class Tokenizer {
  readonly files: ModelFiles;
  /** Ids the tokenizer knows, added tokens included: valid ids are 0 .. vocabSize-1. */
  readonly vocabSize: number;
  readonly bosTokenId: number | null;
  readonly eosTokenIds: readonly number[];
  readonly specialTokenIds: ReadonlySet<number>;
  /** The most bytes of text one token stands for, or null (with the reason) when there is no such bound. */
  readonly byteBound: TokenByteBound;

  readonly #hf: HfTokenizer;
  #worker: EncoderWorker | null = null;
  readonly #decoder: HfDecoder | null;
  /** Piece string per id, filled on first use; undefined = not looked up yet, null = unknown id. */
  readonly #pieces: (string | null | undefined)[];
  /** decode(ids, keep specials) of 1 or 2 ids: key a for [a], vocabSize + a * vocabSize + b for [a, b]. */
  readonly #shortDecodes = new Map<number, string>();

  private constructor(files: ModelFiles, hf: HfTokenizer, byteBound: TokenByteBound) {
    this.files = files;
    this.byteBound = byteBound;
    this.#hf = hf;
    this.#decoder = hf.getDecoder();
    this.vocabSize = hf.getVocabSize(true);
    this.#pieces = new Array<string | null | undefined>(this.vocabSize);
    this.bosTokenId = files.bosTokenId;
    this.eosTokenIds = files.eosTokenIds;
    this.specialTokenIds = new Set(files.specialTokenIds);
  }

  /**
   * Loads the tokenizer of a model: a Hugging Face directory or a GGUF file (see loadModelFiles).
   * No worker unless options.worker is true (then close() it).
   */
  static async load(modelPath: string, options: OpenOptions = {}): Promise<Tokenizer> {
    return Tokenizer.open(await loadModelFiles(modelPath), { worker: options.worker ?? false });
  }

  /**
   * The tokenizer of `files`, its byte bound read without blocking, and (unless options.worker is
   * false) its encoding worker started. close() stops the worker.
   */
  static async open(files: ModelFiles, options: OpenOptions = {}): Promise<Tokenizer> {
    const tokenizer = Tokenizer.fromModelFiles(files, await readByteBound(files.tokenizer));
    if (options.worker ?? true) await tokenizer.startWorker();
    return tokenizer;
  }

  /** Encoding stays on this thread until startWorker(); `byteBound` defaults to one read from the files now. */
  static fromModelFiles(files: ModelFiles, byteBound?: TokenByteBound): Tokenizer {
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
    return new Tokenizer(files, hf, byteBound ?? tokenByteBound(readTokenizerJsonSync(source)));
  }

  /**
   * Starts the encoding worker (a second `tokenizers` instance on the same tokenizer.json), which
   * encodes every text from now on. Rejects if it cannot load the tokenizer.
   */
  async startWorker(): Promise<void> {
    if (this.#worker !== null) return;
    this.#worker = await EncoderWorker.start(this.files.tokenizer);
  }

  /** The encoding worker, while one runs (tests watch its restarts). */
  get worker(): EncoderWorker | null {
    return this.#worker;
  }

  /** Stops the encoding worker; encoding then stays on this thread. */
  async close(): Promise<void> {
    const worker = this.#worker;
    this.#worker = null;
    await worker?.close();
  }

  /** Token ids of `text`, BOS/EOS added as the model's configs say (see EncodeOptions). */
  async encode(text: string, options: EncodeOptions = {}): Promise<number[]> {
    return Array.from(await this.encodeIds(text, options));
  }

  /** encode() as an Int32Array, the engine's prompt type: no per-id copy on this thread for long texts. */
  async encodeIds(text: string, options: EncodeOptions = {}): Promise<Int32Array> {
    const worker = this.#worker;
    const ids =
      worker !== null
        ? await worker.encode(text)
        : Int32Array.from((await this.#hf.encode(text, null, { addSpecialTokens: false })).getIds());
    const bos = this.#addsBos(options) ? this.bosTokenId : null;
    const eos = this.#addsEos(options) ? this.eosTokenIds[0] : undefined;
    if (bos === null && eos === undefined) return ids;
    const out = new Int32Array(ids.length + (bos === null ? 0 : 1) + (eos === undefined ? 0 : 1));
    if (bos !== null) out[0] = bos;
    out.set(ids, bos === null ? 0 : 1);
    if (eos !== undefined) out[out.length - 1] = eos;
    return out;
  }

  /** How many special tokens encode() adds to any text with `options` (BOS, EOS). */
  addedTokens(options: EncodeOptions = {}): number {
    return (this.#addsBos(options) ? 1 : 0) + (this.#addsEos(options) ? 1 : 0);
  }

  /**
   * The most UTF-8 bytes a text can have and still encode (with `options`) to at most `tokens`
   * tokens, by byteBound: a longer text surely encodes to more. Null when there is no bound.
   */
  maxTextBytes(tokens: number, options: EncodeOptions = {}): number | null {
    const per = this.byteBound.maxTokenBytes;
    if (per === null) return null;
    return Math.max(0, tokens - this.addedTokens(options)) * per;
  }

  #addsBos(options: EncodeOptions): boolean {
    return (options.addSpecialTokens ?? true) && this.files.addBosToken && this.bosTokenId !== null;
  }

  #addsEos(options: EncodeOptions): boolean {
    return (options.addSpecialTokens ?? true) && this.files.addEosToken && this.eosTokenIds[0] !== undefined;
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

/** The byte bound of `source`'s tokenizer.json, read without blocking; none when it cannot be read. */
async function readByteBound(source: TokenizerSource): Promise<TokenByteBound> {
  const text = source.kind === 'json' ? source.json : await readFile(source.path, 'utf8').catch(() => null);
  return tokenByteBound(parseJson(text));
}

/** `source`'s tokenizer.json, parsed; null when it cannot be read (the byte bound is then off). */
function readTokenizerJsonSync(source: TokenizerSource): unknown {
  if (source.kind === 'json') return parseJson(source.json);
  try {
    return parseJson(readFileSync(source.path, 'utf8'));
  } catch {
    return null;
  }
}

function parseJson(text: string | null): unknown {
  if (text === null) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return null;
  }
}
