// What the OpenAI-compatible routes share: request clean-up, finish_reason and usage mapping,
// logprobs in OpenAI's shapes, and the SSE loop (`data: {chunk}` ... `data: [DONE]`).
import { randomUUID } from 'node:crypto';
import {
  type ChatLogprobs,
  type CompletionLogprobs,
  errorResponses,
  type OpenAiFinishReason,
  type OpenAiUsage,
  StrataError,
} from '@strata/common';
import type { FastifyRequest } from 'fastify';
import type { FinishReason } from '../engine/engine.js';
import type { TextDone, TextEvent, TextToken } from '../engine/text-generation.js';
import type { SseStream } from '../http/sse.js';
import type { Tokenizer } from '../model/tokenizer.js';

export const openAiErrors = errorResponses(400, 401, 404, 429, 503);

export const completionId = (): string => `cmpl-${randomUUID().replaceAll('-', '')}`;
export const chatCompletionId = (): string => `chatcmpl-${randomUUID().replaceAll('-', '')}`;
export const unixSeconds = (): number => Math.floor(Date.now() / 1000);

/**
 * Our finish reasons in OpenAI terms. 'abort' stays 'abort', as vLLM reports a cancelled
 * request; 'timeout' (the backend's per-request deadline cut the output short) becomes
 * 'length': the output is truncated by a limit, which is what 'length' tells a client.
 */
export function openAiFinishReason(reason: FinishReason): OpenAiFinishReason {
  return reason === 'timeout' ? 'length' : reason;
}

export function openAiUsage(done: TextDone): OpenAiUsage {
  const { inputTokens, outputTokens } = done.usage;
  return {
    prompt_tokens: inputTokens,
    completion_tokens: outputTokens,
    total_tokens: inputTokens + outputTokens,
  };
}

/**
 * A whole answer for a non-streamed response: its text, every token fed to `logprobs` (when
 * asked for), and how it ended ('abort' with zero usage if the events stopped without a done).
 */
export async function collectAnswer(
  events: AsyncIterableIterator<TextEvent>,
  logprobs: { add(token: TextToken): void } | undefined,
): Promise<{ text: string; finishReason: OpenAiFinishReason; usage: OpenAiUsage }> {
  let text = '';
  let done: TextDone | undefined;
  for await (const event of events) {
    if (event.type === 'token') logprobs?.add(event);
    else done = event;
    text += event.text;
  }
  return {
    text,
    finishReason: done ? openAiFinishReason(done.finishReason) : 'abort',
    usage: done ? openAiUsage(done) : { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
  };
}

/** The text of one token id as it stands alone (special tokens included). */
function tokenText(tokenizer: Tokenizer, id: number): string {
  return tokenizer.decode([id], { skipSpecialTokens: false });
}

/** Collects /v1/completions logprobs: tokens, token_logprobs, top_logprobs, text_offset. */
export class CompletionLogprobsBuilder {
  readonly value: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  constructor(
    private readonly tokenizer: Tokenizer,
    private offset = 0,
  ) {}

  /** Adds one token; `text` is the text it made final (advances text_offset). */
  add(token: TextToken): void {
    this.value.tokens.push(tokenText(this.tokenizer, token.id));
    this.value.token_logprobs.push(token.logprob ?? 0);
    const top: Record<string, number> = {};
    for (const t of token.topLogprobs ?? []) top[tokenText(this.tokenizer, t.token)] = t.logprob;
    this.value.top_logprobs?.push(top);
    this.value.text_offset.push(this.offset);
    this.offset += token.text.length;
  }
}

/** Collects /v1/chat/completions logprobs: content[{token, logprob, bytes, top_logprobs}]. */
export class ChatLogprobsBuilder {
  readonly value: ChatLogprobs = { content: [] };
  constructor(private readonly tokenizer: Tokenizer) {}

  add(token: TextToken): void {
    const entry = (id: number, logprob: number) => {
      const text = tokenText(this.tokenizer, id);
      return { token: text, logprob, bytes: [...Buffer.from(text, 'utf8')] };
    };
    this.value.content.push({
      ...entry(token.id, token.logprob ?? 0),
      top_logprobs: (token.topLogprobs ?? []).map((t) => entry(t.token, t.logprob)),
    });
  }
}

/** The error to put in the stream when the engine fails after the 200 went out. */
function streamFailure(err: unknown): StrataError {
  return err instanceof StrataError ? err : new StrataError('STRATA_ENGINE_ERROR', (err as Error).message);
}

export interface ChunkWriter {
  /** A chunk sent as soon as the stream opens (chat: delta.role 'assistant'). */
  opening?(): unknown;
  /**
   * A chunk for a token (or for the tail text and the finish reason when `done` is set);
   * undefined sends nothing for this token (text held back, e.g. a tool call still open).
   */
  delta(text: string, token: TextToken | undefined, done: TextDone | undefined): unknown;
  /** The usage chunk (choices: []), sent last when stream_options.include_usage. */
  usage(usage: OpenAiUsage): unknown;
}

/**
 * Streams `events` as OpenAI chunks: one per token that produced text (or carries logprobs),
 * a last one with the held-back tail and finish_reason, the usage chunk when asked for, then
 * `data: [DONE]`. An engine failure after the start becomes `data: {"error":{...}}` then [DONE].
 */
export async function streamChunks(
  request: FastifyRequest,
  sse: SseStream,
  events: AsyncIterableIterator<TextEvent>,
  writer: ChunkWriter,
  options: { includeUsage: boolean; everyToken: boolean },
): Promise<void> {
  sse.open();
  try {
    if (writer.opening) await sse.send(writer.opening());
    for await (const event of events) {
      if (event.type === 'token') {
        if (event.text !== '' || options.everyToken) {
          const chunk = writer.delta(event.text, event, undefined);
          if (chunk !== undefined) await sse.send(chunk);
        }
      } else {
        await sse.send(writer.delta(event.text, undefined, event));
        if (options.includeUsage) await sse.send(writer.usage(openAiUsage(event)));
      }
    }
  } catch (err) {
    request.log.error({ err }, 'stream failed after it started');
    await sse.send(streamFailure(err).toBody());
  } finally {
    await sse.send('[DONE]');
    sse.end();
  }
}
