// Text in, streamed text out: tokenizes the prompt, drives one engine request, turns its
// tokens into UTF-8-safe text deltas and ends the output at the first stop string. This is
// what the HTTP routes stream as SSE; the engine below it only sees token ids.
import { StrataError } from '@strata/common';
import { IncrementalDetokenizer } from '../model/detokenizer.js';
import { StopMatcher } from '../model/stop.js';
import type { Tokenizer } from '../model/tokenizer.js';
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
  prompt: string | readonly number[];
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

  async promptIds(prompt: string | readonly number[]): Promise<number[]> {
    const ids = typeof prompt === 'string' ? await this.tokenizer.encode(prompt) : [...prompt];
    if (ids.length === 0) throw new StrataError('STRATA_INVALID_REQUEST', 'the prompt is empty');
    return ids;
  }

  /**
   * Tokenizes and submits the request, then returns its events: token events, then one done
   * event. Bad input rejects here, before anything is queued or sent, so an HTTP route can still
   * answer with a 4xx status.
   */
  async start(request: TextRequest): Promise<AsyncIterableIterator<TextEvent>> {
    const promptIds = await this.promptIds(request.prompt);
    const stops = new StopMatcher(request.stop ?? [], {
      includeStopString: request.includeStopString ?? false,
    });
    const detok = new IncrementalDetokenizer(this.tokenizer, { promptIds });
    const controller = new AbortController();
    const tokens = this.engine.generate(promptIds, this.samplingParams(request.params), {
      signal: controller.signal,
      ...(request.priority !== undefined ? { priority: request.priority } : {}),
      ...(request.tenant !== undefined ? { tenant: request.tenant } : {}),
      ...(request.onScheduled ? { onScheduled: request.onScheduled } : {}),
    });
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
