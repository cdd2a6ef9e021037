// How few tokens a text can encode to, from its size, without tokenizing it (issue 23, item 7):
// L, the most bytes of text one token of the tokenizer covers, read from its tokenizer.json. A text
// whose counted characters take C bytes of UTF-8 encodes to at least ceil(C / L) tokens, so a
// prompt far too long for the context is refused by its size before any tokenizing.
//
// Counted characters are those every encoding covers with tokens of at most L bytes. Others may
// not be: tinystories-656k fuses any run of characters missing from its vocabulary into one <unk>
// (byte_fallback without byte pieces), and SmolLM2's GGUF tokenizer drops the control bytes its
// byte-level alphabet lacks (no unk token). Leaving them out of C keeps the bound a true lower one.
//
// A bound is only given where it provably holds (else maxTokenBytes is null, with the reason):
//  - a BPE model without continuing_subword_prefix / end_of_word_suffix (WordPiece and Unigram can
//    turn a long run of text into one token) and no truncation;
//  - a normalizer that never shortens text and writes only known characters (none, Prepend, Replace
//    of a string by one at least as long), and a pre-tokenizer that drops nothing (ByteLevel,
//    Metaspace, Digits, Split and Punctuation without 'Removed');
//  - no added token with lstrip/rstrip (it swallows any run of whitespace beside it).
// Per piece: a <0xNN> byte-fallback piece is 1 byte; with a ByteLevel pre-tokenizer each character
// of a piece stands for one byte of the text; otherwise its UTF-8 length, which is at least that of
// the text it covers (normalizers and Metaspace only lengthen text: ' ' becomes the 3-byte '▁').
// Added tokens count their UTF-8 length: they match the (raw or normalized) text literally.

const BYTE_PIECE = /^<0x[0-9A-Fa-f]{2}>$/;
// Bytes that never occur in UTF-8 (what a JS string becomes on its way to the tokenizer).
const NOT_UTF8 = (b: number) => b === 0xc0 || b === 0xc1 || b >= 0xf5;

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const byteLength = (s: string): number => Buffer.byteLength(s, 'utf8');
const utf8Length = (cp: number): number => (cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4);

export class TokenByteBound {
  /** L: no token covers more than this many bytes of counted text; null when no bound holds. */
  readonly maxTokenBytes: number | null;
  /** Why there is no bound (null when there is one). */
  readonly reason: string | null;
  /** Per BMP code point, 1 when counted; null when every character is counted. */
  readonly #bmp: Uint8Array | null;
  readonly #astral: ((cp: number) => boolean) | null;

  private constructor(
    maxTokenBytes: number | null,
    reason: string | null,
    counted: ((cp: number) => boolean) | null,
  ) {
    this.maxTokenBytes = maxTokenBytes;
    this.reason = reason;
    if (counted === null) {
      this.#bmp = null;
      this.#astral = null;
    } else {
      this.#bmp = new Uint8Array(0x10000);
      for (let cp = 0; cp < 0x10000; cp++) this.#bmp[cp] = counted(cp) ? 1 : 0;
      this.#astral = counted;
    }
  }

  /** Whether every character of a text counts (countedBytes is then its UTF-8 length). */
  get countsEveryChar(): boolean {
    return this.#bmp === null;
  }

  static none(reason: string): TokenByteBound {
    return new TokenByteBound(null, reason, null);
  }

  static of(maxTokenBytes: number, counted: ((cp: number) => boolean) | null): TokenByteBound {
    return new TokenByteBound(maxTokenBytes, null, counted);
  }

  /**
   * UTF-8 bytes of the counted characters of `text` (all of it when every character counts); the
   * count may stop early once it passes `stopAbove`. Lone surrogates count as U+FFFD, as the
   * binding passes them on.
   */
  countedBytes(text: string, stopAbove = Number.POSITIVE_INFINITY): number {
    const bmp = this.#bmp;
    const astral = this.#astral;
    if (bmp === null || astral === null) return byteLength(text);
    let bytes = 0;
    for (let i = 0; i < text.length; i++) {
      let cp = text.charCodeAt(i);
      if (cp >= 0xd800 && cp <= 0xdfff) {
        const low = cp <= 0xdbff && i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
        if (low >= 0xdc00 && low <= 0xdfff) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          i++;
          if (astral(cp)) bytes += 4;
        } else if (bmp[0xfffd] === 1) bytes += 3;
      } else if (bmp[cp] === 1) bytes += utf8Length(cp);
      if (bytes > stopAbove) return bytes;
    }
    return bytes;
  }
}

/** The byte bound of a parsed tokenizer.json (see the file comment). */
export function tokenByteBound(tokenizerJson: unknown): TokenByteBound {
  if (!isObject(tokenizerJson)) return TokenByteBound.none('tokenizer.json is missing or not an object');
  const { model, normalizer, pre_tokenizer: pre, truncation } = tokenizerJson;
  if (truncation !== null && truncation !== undefined) return TokenByteBound.none('tokenizer.json truncates');
  if (!isObject(model) || model.type !== 'BPE') {
    return TokenByteBound.none(
      `the tokenizer model is ${isObject(model) ? String(model.type) : 'missing'}, not BPE`,
    );
  }
  if (typeof model.continuing_subword_prefix === 'string' || typeof model.end_of_word_suffix === 'string') {
    return TokenByteBound.none(
      'the BPE model marks subwords (continuing_subword_prefix or end_of_word_suffix)',
    );
  }
  const vocab = model.vocab;
  if (!isObject(vocab) || Object.keys(vocab).length === 0) {
    return TokenByteBound.none('the BPE vocabulary is missing or empty');
  }
  const dropper = droppingPreTokenizer(pre);
  if (dropper !== null) return TokenByteBound.none(`the pre-tokenizer ${dropper} can drop text`);

  const pieces = Object.keys(vocab);
  const inVocab = new Set(pieces);
  const byteLevel = hasPreTokenizer(pre, 'ByteLevel');
  const byteFallback = model.byte_fallback === true && allBytePieces(inVocab);
  const known = knownChars(inVocab, byteLevel, byteFallback);

  // Every normalizer step must keep text at least as long and write only known characters.
  const steps = normalizerSteps(normalizer);
  if (typeof steps === 'string') return TokenByteBound.none(`the normalizer ${steps} can shorten text`);
  const replaced = new Set<number>();
  for (const step of steps) {
    if (![...step.writes].every((c) => known(c.codePointAt(0) as number))) {
      return TokenByteBound.none(
        `the normalizer writes ${JSON.stringify(step.writes)}, outside the vocabulary`,
      );
    }
    if (step.replaces !== null && [...step.replaces].length === 1)
      replaced.add(step.replaces.codePointAt(0) as number);
  }
  for (const replacement of metaspaceReplacements(pre)) {
    if (!known(replacement.codePointAt(0) as number)) {
      return TokenByteBound.none(
        `the Metaspace replacement ${JSON.stringify(replacement)} is outside the vocabulary`,
      );
    }
    replaced.add(0x20);
  }

  let max = 0;
  const addedTokens = Array.isArray(tokenizerJson.added_tokens) ? tokenizerJson.added_tokens : [];
  for (const token of addedTokens) {
    if (!isObject(token) || typeof token.content !== 'string')
      return TokenByteBound.none('an added token has no content');
    if (token.lstrip === true || token.rstrip === true) {
      return TokenByteBound.none(
        `the added token ${JSON.stringify(token.content)} strips the whitespace beside it`,
      );
    }
    max = Math.max(max, byteLength(token.content));
  }
  // A byte piece that merges can also build covers its literal text (6 bytes), not 1 byte.
  const mergedBytePieces = byteFallback ? bytePiecesFromMerges(model.merges) : new Set<string>();
  for (const piece of pieces) {
    let bytes: number;
    if (byteFallback && BYTE_PIECE.test(piece) && !mergedBytePieces.has(piece)) bytes = 1;
    else if (byteLevel) bytes = [...piece].length;
    else bytes = byteLength(piece);
    if (bytes > max) max = bytes;
  }
  // Every character counts when unknown ones become byte pieces or byte-level characters.
  const allKnown = byteFallback || (byteLevel && byteLevelMissing(inVocab).every(NOT_UTF8));
  return TokenByteBound.of(max, allKnown ? null : (cp) => known(cp) || replaced.has(cp));
}

/**
 * Whether character `cp` is always covered by vocabulary pieces: its byte-level characters are all
 * in the vocabulary (ByteLevel), its bytes are byte pieces (complete byte fallback), or it is a
 * one-character piece itself.
 */
function knownChars(
  vocab: ReadonlySet<string>,
  byteLevel: boolean,
  byteFallback: boolean,
): (cp: number) => boolean {
  if (byteFallback) return () => true;
  if (byteLevel) {
    const missing = new Set(byteLevelMissing(vocab).filter((b) => !NOT_UTF8(b)));
    const missingHigh = [...missing].some((b) => b >= 0x80);
    return (cp) => {
      if (cp < 0x80) return !missing.has(cp);
      return !missingHigh || !utf8Bytes(cp).some((b) => missing.has(b));
    };
  }
  return (cp) => vocab.has(String.fromCodePoint(cp));
}

/** The UTF-8 bytes of code point `cp` (a surrogate as U+FFFD, as a JS string reaches the tokenizer). */
function utf8Bytes(cp: number): number[] {
  if (cp >= 0xd800 && cp <= 0xdfff) return [0xef, 0xbf, 0xbd];
  if (cp < 0x80) return [cp];
  if (cp < 0x800) return [0xc0 | (cp >> 6), 0x80 | (cp & 0x3f)];
  if (cp < 0x10000) return [0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
  return [0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
}

interface NormalizerStep {
  /** What the step writes into the text. */
  writes: string;
  /** The string a Replace step replaces (null for Prepend). */
  replaces: string | null;
}

/** The steps of a normalizer that only lengthens text, or the name of one that may shorten it. */
function normalizerSteps(n: unknown): NormalizerStep[] | string {
  if (n === null || n === undefined) return [];
  if (!isObject(n)) return 'of unknown shape';
  switch (n.type) {
    case 'Prepend':
      return typeof n.prepend === 'string'
        ? [{ writes: n.prepend, replaces: null }]
        : 'Prepend (of unknown shape)';
    case 'Replace': {
      const pattern = isObject(n.pattern) ? n.pattern.String : undefined;
      if (typeof pattern !== 'string' || pattern === '' || typeof n.content !== 'string') {
        return 'Replace (of a regex or an empty string)';
      }
      if (byteLength(n.content) < byteLength(pattern)) return 'Replace (by a shorter string)';
      return [{ writes: n.content, replaces: pattern }];
    }
    case 'Sequence': {
      if (!Array.isArray(n.normalizers)) return 'Sequence (of unknown shape)';
      const steps: NormalizerStep[] = [];
      for (const inner of n.normalizers) {
        const found = normalizerSteps(inner);
        if (typeof found === 'string') return found;
        steps.push(...found);
      }
      return steps;
    }
    default:
      return String(n.type);
  }
}

/** The first pre-tokenizer in `p` that can leave text out of every token, or null when none can. */
function droppingPreTokenizer(p: unknown): string | null {
  if (p === null || p === undefined) return null;
  if (!isObject(p)) return 'of unknown shape';
  switch (p.type) {
    case 'ByteLevel':
    case 'Metaspace':
    case 'Digits':
      return null;
    case 'Split':
    case 'Punctuation':
      return p.behavior === 'Removed' ? `${p.type} (behavior Removed)` : null;
    case 'Sequence': {
      if (!Array.isArray(p.pretokenizers)) return 'Sequence (of unknown shape)';
      for (const inner of p.pretokenizers) {
        const found = droppingPreTokenizer(inner);
        if (found !== null) return found;
      }
      return null;
    }
    default:
      return String(p.type);
  }
}

function hasPreTokenizer(p: unknown, type: string): boolean {
  if (!isObject(p)) return false;
  if (p.type === type) return true;
  return (
    p.type === 'Sequence' &&
    Array.isArray(p.pretokenizers) &&
    p.pretokenizers.some((q) => hasPreTokenizer(q, type))
  );
}

/** The replacement characters of the Metaspace pre-tokenizers in `p` (each stands for a space). */
function metaspaceReplacements(p: unknown): string[] {
  if (!isObject(p)) return [];
  if (p.type === 'Metaspace') return [typeof p.replacement === 'string' ? p.replacement : '\u2581'];
  if (p.type !== 'Sequence' || !Array.isArray(p.pretokenizers)) return [];
  return p.pretokenizers.flatMap(metaspaceReplacements);
}

function allBytePieces(vocab: ReadonlySet<string>): boolean {
  for (let b = 0; b < 256; b++) {
    if (!vocab.has(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`)) return false;
  }
  return true;
}

/** The <0xNN> pieces that some merge produces (merges are "a b" strings or [a, b] pairs). */
function bytePiecesFromMerges(merges: unknown): Set<string> {
  const found = new Set<string>();
  if (!Array.isArray(merges)) return found;
  for (const merge of merges) {
    let piece: string | undefined;
    if (typeof merge === 'string') {
      const at = merge.indexOf(' ', 1);
      if (at > 0) piece = merge.slice(0, at) + merge.slice(at + 1);
    } else if (Array.isArray(merge) && merge.length === 2) {
      piece = `${merge[0]}${merge[1]}`;
    }
    if (piece !== undefined && BYTE_PIECE.test(piece)) found.add(piece);
  }
  return found;
}

/** The bytes whose byte-level character the vocabulary lacks. */
function byteLevelMissing(vocab: ReadonlySet<string>): number[] {
  return byteLevelAlphabet().flatMap((c, b) => (vocab.has(c) ? [] : [b]));
}

/** GPT-2's bytes_to_unicode: the character that stands for each byte after a ByteLevel pre-tokenizer. */
export function byteLevelAlphabet(): string[] {
  const direct = (b: number) =>
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const chars: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) chars.push(String.fromCodePoint(direct(b) ? b : next++));
  return chars;
}
