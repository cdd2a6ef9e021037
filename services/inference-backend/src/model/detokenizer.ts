// Incremental detokenization for streaming: token ids in (one or a few per engine step), new text
// out, such that the deltas concatenate to exactly tokenizer.decode(all ids).
//
// Text is not a per-token function: SentencePiece's '▁' becomes a space that the decoder strips at
// the start of the text, and byte pieces (<0xE2><0x82><0xAC>) only become a character together. So,
// as vLLM does, each step decodes a small window twice, the ids since the last emission with and
// without the new ones, and emits the difference. Windows start and end only where the text is
// final, which makes the leading-space strip cancel out and keeps every character whole:
//  - a ByteFallback decoder turns a whole run of byte pieces into U+FFFD if any byte of it is
//    invalid, so nothing is emitted while the ids end inside a byte run;
//  - a byte-level decoder (GPT-2 / Llama 3 style) ends an unfinished character with U+FFFD, so
//    nothing is emitted while the text ends with U+FFFD.
// finish() flushes what is held when the sequence ends. Cost per step is O(window), and the window
// only grows while text is held (an unfinished character), so it stays a few ids long.

import type { Tokenizer } from './tokenizer.js';

export interface DetokenizerOptions {
  /**
   * The prompt's ids. The output then continues the prompt's text: its first delta keeps the space
   * that begins the first output word (" upon" after "Once"), which decoding the output alone drops.
   */
  promptIds?: ArrayLike<number>;
  /** Leave special tokens out of the text (default true). */
  skipSpecialTokens?: boolean;
}

const REPLACEMENT = '\uFFFD';
// Prompt ids decoded as left context of the first output token; enough for any decoder's
// look-behind (leading-space strip), as in vLLM.
const PROMPT_CONTEXT = 5;
// Drop ids left of the window once this many have accumulated, so memory stays O(window).
const COMPACT_AT = 1024;

export class IncrementalDetokenizer {
  readonly #tokenizer: Tokenizer;
  readonly #skipSpecial: boolean;
  /** Ids that contribute text (specials removed when skipped); ids before #prefix are dropped over time. */
  #ids: number[] = [];
  /** ids[#prefix, #read) is the left context whose text was already emitted (or is the prompt's). */
  #prefix = 0;
  /** ids[#read, end) have not been emitted yet. */
  #read = 0;
  #finished = false;

  constructor(tokenizer: Tokenizer, options: DetokenizerOptions = {}) {
    this.#tokenizer = tokenizer;
    this.#skipSpecial = options.skipSpecialTokens ?? true;
    if (options.promptIds !== undefined) this.#startAfterPrompt(options.promptIds);
  }

  /** Ids held in the decode window (pending text plus left context); a few in normal operation. */
  get windowSize(): number {
    return this.#ids.length - this.#prefix;
  }

  /** Adds generated ids; returns the text that became final ('' while a character is unfinished). */
  push(ids: Iterable<number>): string {
    if (this.#finished) throw new Error('IncrementalDetokenizer.push() after finish()');
    for (const id of ids) if (this.#keeps(id)) this.#ids.push(id);
    if (this.#ids.length === this.#read) return '';
    const last = this.#ids.at(-1);
    if (last !== undefined && this.#tokenizer.isByteFallback(last)) return '';
    return this.#emit(false);
  }

  /** Ends the sequence: returns whatever text was still held (possibly ending with U+FFFD). */
  finish(): string {
    if (this.#finished) return '';
    this.#finished = true;
    return this.#ids.length === this.#read ? '' : this.#emit(true);
  }

  #keeps(id: number): boolean {
    return !(this.#skipSpecial && this.#tokenizer.isSpecial(id));
  }

  #emit(final: boolean): string {
    const held = this.#tokenizer.decode(this.#ids.slice(this.#prefix, this.#read), {
      skipSpecialTokens: false,
    });
    const text = this.#tokenizer.decode(this.#ids.slice(this.#prefix), { skipSpecialTokens: false });
    if (!final && (text.length <= held.length || text.endsWith(REPLACEMENT))) return '';
    let delta: string;
    if (text.startsWith(held)) {
      delta = text.slice(held.length);
    } else if (final) {
      // Reachable only when output bytes turn the prompt's trailing byte run invalid; the prompt's
      // text cannot be taken back, so send the part that differs.
      delta = text.slice(commonPrefixLength(held, text));
    } else {
      return '';
    }
    this.#prefix = this.#read;
    this.#read = this.#ids.length;
    if (this.#prefix >= COMPACT_AT) {
      this.#ids = this.#ids.slice(this.#prefix);
      this.#read -= this.#prefix;
      this.#prefix = 0;
    }
    return delta;
  }

  #startAfterPrompt(promptIds: ArrayLike<number>): void {
    const tok = this.#tokenizer;
    // Keep a tail of the kept ids long enough for the context below, starting at a byte-run
    // boundary; read from the end, so a long prompt costs no more than a short one.
    const tail: number[] = [];
    for (let i = promptIds.length - 1; i >= 0; i--) {
      const id = promptIds[i] as number;
      if (!this.#keeps(id)) continue;
      const first = tail.at(-1);
      if (
        tail.length >= 4 * PROMPT_CONTEXT &&
        !(first !== undefined && tok.isByteFallback(first) && tok.isByteFallback(id))
      )
        break;
      tail.push(id);
    }
    this.#ids = tail.reverse();
    // The prompt may end inside a character (a cut byte run): then that character belongs to the
    // output, so pending text starts before it.
    let read = this.#ids.length;
    while (
      read > 0 &&
      tok.decode(this.#ids.slice(0, read), { skipSpecialTokens: false }).endsWith(REPLACEMENT)
    ) {
      read -= 1;
    }
    // The window must not start inside a byte run: its bytes decode only together.
    let prefix = Math.max(read - PROMPT_CONTEXT, 0);
    while (prefix > 0 && isByteAt(tok, this.#ids, prefix) && isByteAt(tok, this.#ids, prefix - 1))
      prefix -= 1;
    this.#prefix = prefix;
    this.#read = read;
  }
}

function isByteAt(tokenizer: Tokenizer, ids: readonly number[], index: number): boolean {
  const id = ids[index];
  return id !== undefined && tokenizer.isByteFallback(id);
}

/** Length of the longest common prefix of `a` and `b`, never splitting a surrogate pair. */
function commonPrefixLength(a: string, b: string): number {
  let n = 0;
  while (n < a.length && n < b.length && a.charCodeAt(n) === b.charCodeAt(n)) n += 1;
  const before = b.charCodeAt(n - 1);
  return n > 0 && before >= 0xd800 && before <= 0xdbff ? n - 1 : n;
}
