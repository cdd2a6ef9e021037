// Text in, streamed text out: tokenizes the prompt, drives one engine request, turns its
// tokens into UTF-8-safe text deltas and ends the output at the first stop string. This is
// what the HTTP routes stream as SSE; the engine below it only sees token ids.
import { StrataError } from '@strata/common';
import { IncrementalDetokenizer } from '../model/detokenizer.js';
import { StopMatcher } from '../model/stop.js';
import type { EncodeOptions, Tokenizer } from '../model/tokenizer.js';
import type {
  Engine,
  FinishReason,
  GeneratedToken,
  GenerateOptions,
  SamplingParams,
  TopLogprob,
} from './engine.js';
import { guarded } from './guarded.js';

export interface TextRequest extends GenerateOptions {
  /** Text (tokenized here, BOS per the model's configs) or token ids used as they are. */
  prompt: string | ArrayLike<number>;
  params?: SamplingParams;
  stop?: readonly string[];
  includeStopString?: boolean;
}

/** One generated token and the text it made final (may be '' while a character is unfinished). */
export interface TextToken {
  type: 'token';
  id: number;
  /** Position in the output, from 0. */
  index: number;
  text: string;
  /** When the engine sampled the token, on performance.now()'s clock. */
  sampledAt: number;
  logprob?: number;
  topLogprobs?: TopLogprob[];
}

export interface TextDone {
  type: 'done';
  finishReason: FinishReason;
  /** Set when a stop string ended the output. */
  stop?: string;
  /** Text still held at the end (a partial stop-string candidate or an unfinished character). */
  text: string;
  usage: { inputTokens: number; outputTokens: number };
}

export type TextEvent = TextToken | TextDone;

export class TextGenerator {
  /**
   * End-of-generation ids of the tokenizer's model files that the engine does not stop at by
   * itself (a GGUF file's eot/eom ids, a tokenizer_config.json eos_token missing from config.json):
   * every request stops at them too, as stop token ids, unless it ignores EOS.
   */
  readonly extraEndIds: readonly number[];

  constructor(
    readonly engine: Engine,
    readonly tokenizer: Tokenizer,
  ) {
    const { eosTokenIds, vocabSize } = engine.info.model;
    this.extraEndIds = tokenizer.eosTokenIds.filter((id) => !eosTokenIds.includes(id) && id < vocabSize);
  }

  /** `params` with the extra end-of-generation ids added to stopTokenIds (none when ignoreEos). */
  samplingParams(params: SamplingParams = {}): SamplingParams {
    if (this.extraEndIds.length === 0 || params.ignoreEos) return params;
    const stops = params.stopTokenIds ?? [];
    const missing = this.extraEndIds.filter((id) => !stops.includes(id));
    return missing.length === 0 ? params : { ...params, stopTokenIds: [...stops, ...missing] };
  }

  /**
   * The prompt's ids: text is checked by size (checkPromptSize), then encoded with BOS/EOS as the
   * model's configs say; ids are used as they are. `maxTokens` is the request's output budget.
   */
  async promptIds(prompt: string | ArrayLike<number>, maxTokens?: number): Promise<Int32Array> {
    let ids: Int32Array;
    if (typeof prompt === 'string') {
      this.checkPromptSize(prompt, maxTokens);
      ids = await this.tokenizer.encodeIds(prompt);
    } else {
      ids = Int32Array.from(prompt);
    }
    if (ids.length === 0) throw new StrataError('STRATA_INVALID_REQUEST', 'the prompt is empty');
    return ids;
  }

  /**
   * Refuses, with the engine's STRATA_PROMPT_TOO_LONG, a prompt text whose size alone shows that it
   * cannot fit max_model_len beside `maxTokens` output tokens, without tokenizing it: the
   * tokenizer's byteBound says how many tokens it is at least. Text that may fit passes; the engine
   * counts its tokens. maxTokens undefined: counted as 1, the least any request generates.
   */
  checkPromptSize(text: string, maxTokens: number | undefined, options: EncodeOptions = {}): void {
    const bound = this.tokenizer.byteBound;
    const limit = this.engine.info.engine.maxModelLen;
    const outputs = Math.max(maxTokens ?? 1, 1);
    const room = limit - outputs; // the most prompt tokens the engine admits
    const maxBytes = this.tokenizer.maxTextBytes(room, options);
    // A UTF-16 code unit is at most 3 bytes of UTF-8: short texts need no counting.
    if (maxBytes === null || bound.maxTokenBytes === null || text.length * 3 <= maxBytes) return;
    if (bound.countedBytes(text, maxBytes) <= maxBytes) return;
    const bytes = Buffer.byteLength(text, 'utf8');
    const size = bound.countsEveryChar
      ? `the prompt is ${bytes} bytes of UTF-8`
      : `the prompt is ${bytes} bytes of UTF-8, over ${maxBytes} of them in characters this tokenizer never drops or fuses`;
    const budget = maxTokens !== undefined && maxTokens > 1 ? ` with max_tokens ${maxTokens}` : '';
    throw new StrataError(
      'STRATA_PROMPT_TOO_LONG',
      `${size}; no token of this model covers more than ${bound.maxTokenBytes} bytes, so it is more than ` +
        `${room} tokens, the most that max_model_len ${limit} leaves for a prompt${budget}; ` +
        `prompts over ${maxBytes} bytes are refused without tokenizing`,
    );
  }

  /**
   * Tokenizes and submits the request, then returns its events: token events, then one done
   * event. Bad input rejects here, before anything is queued or sent, so an HTTP route can still
   * answer with a 4xx status.
   */
  async start(request: TextRequest): Promise<AsyncIterableIterator<TextEvent>> {
    const promptIds = await this.promptIds(request.prompt, request.params?.maxTokens);
    const stops = new StopMatcher(request.stop ?? [], {
      includeStopString: request.includeStopString ?? false,
    });
    const controller = new AbortController();
    // Submitted first: a prompt over max_model_len is refused before any other work on it.
    const tokens = this.engine.generate(promptIds, this.samplingParams(request.params), {
      signal: controller.signal,
      ...(request.priority !== undefined ? { priority: request.priority } : {}),
      ...(request.tenant !== undefined ? { tenant: request.tenant } : {}),
      ...(request.onScheduled ? { onScheduled: request.onScheduled } : {}),
      ...(request.constraint ? { constraint: request.constraint } : {}),
    });
    let detok: IncrementalDetokenizer;
    try {
      detok = new IncrementalDetokenizer(this.tokenizer, { promptIds });
    } catch (err) {
      void tokens.return(); // cancels the engine request
      throw err;
    }
    const abortFromCaller = () => controller.abort(request.signal?.reason);
    request.signal?.addEventListener('abort', abortFromCaller, { once: true });
    if (request.signal?.aborted) abortFromCaller();
    const detach = () => request.signal?.removeEventListener('abort', abortFromCaller);
    return guarded(this.events(tokens, promptIds.length, stops, detok, detach), () => {
      detach();
      void tokens.return(); // cancels the engine request
    });
  }

  /** start() and its events in one stream. */
  async *stream(request: TextRequest): AsyncGenerator<TextEvent> {
    yield* await this.start(request);
  }

  private async *events(
    tokens: AsyncIterableIterator<GeneratedToken>,
    inputTokens: number,
    stops: StopMatcher,
    detok: IncrementalDetokenizer,
    detach: () => void,
  ): AsyncGenerator<TextEvent> {
    let index = 0;
    let finishReason: FinishReason = 'abort';
    let stop: string | undefined;
    try {
      for await (const event of tokens) {
        if (event.token !== undefined) {
          const { text, stop: matched } = stops.push(detok.push([event.token]));
          const out: TextToken = {
            type: 'token',
            id: event.token,
            index: index++,
            text,
            sampledAt: event.sampledAt ?? performance.now(),
          };
          if (event.logprob !== undefined) out.logprob = event.logprob;
          if (event.topLogprobs) out.topLogprobs = event.topLogprobs;
          yield out;
          if (matched !== null) {
            stop = matched;
            finishReason = 'stop';
            break; // leaving the stream cancels the engine request and frees its blocks
          }
        }
        if (event.finishReason) finishReason = event.finishReason;
      }
    } finally {
      detach();
    }
    const tail = stop === undefined ? stops.push(detok.finish()).text + stops.finish() : '';
    const done: TextDone = {
      type: 'done',
      finishReason,
      text: tail,
      usage: { inputTokens, outputTokens: index },
    };
    if (stop !== undefined) done.stop = stop;
    yield done;
  }

  /** The whole output at once. */
  async complete(request: TextRequest): Promise<{ text: string; tokenIds: number[]; done: TextDone }> {
    let text = '';
    const tokenIds: number[] = [];
    for await (const event of this.stream(request)) {
      text += event.text;
      if (event.type === 'token') tokenIds.push(event.id);
      else return { text, tokenIds, done: event };
    }
    throw new StrataError('STRATA_ENGINE_ERROR', 'the token stream ended without a done event');
  }
}
