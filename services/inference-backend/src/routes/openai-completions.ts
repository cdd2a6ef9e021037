// POST /v1/completions (OpenAI-compatible, as vLLM serves it): JSON, or SSE chunks then [DONE].
import {
  type CompletionRequest,
  type CompletionResponse,
  checkStreamOptions,
  completionRequestSchema,
  completionResponseSchema,
  dropNullFields,
  grammarOf,
} from '@strata/common';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { SseStream } from '../http/sse.js';
import type { ModelHost } from '../inference/model-host.js';
import { requestContext } from '../observability/request-context.js';
import {
  CompletionLogprobsBuilder,
  collectAnswer,
  completionId,
  openAiErrors,
  openAiFinishReason,
  streamChunks,
  unixSeconds,
} from './openai-shared.js';
import { clientGone, platformFields, samplingParams, stopStrings } from './request-fields.js';

export interface OpenAiRouteOptions {
  host: ModelHost;
  sseHeartbeatMs: number;
}

/** The one prompt of a completions body: text or token ids. */
function singlePrompt(prompt: CompletionRequest['prompt']): string | number[] {
  if (typeof prompt === 'string') return prompt;
  const first = prompt[0];
  if (typeof first === 'number') return prompt as number[];
  return first as string | number[]; // the schema allows exactly one string or id list here
}

export const completionsRoutes: FastifyPluginAsyncZod<OpenAiRouteOptions> = async (app, options) => {
  app.post(
    '/v1/completions',
    {
      preValidation: dropNullFields,
      schema: {
        summary: 'OpenAI-compatible text completion; SSE chunks when stream is true',
        body: completionRequestSchema,
        response: { 200: completionResponseSchema, ...openAiErrors },
      },
    },
    async (request, reply) => {
      const runtime = options.host.get();
      const body = request.body as CompletionRequest; // no nulls left: dropNullFields ran first
      runtime.checkModel(body.model);
      checkStreamOptions(body);
      const sse = body.stream ? new SseStream(reply, options.sseHeartbeatMs) : undefined;
      const grammar = grammarOf(body); // before any work: two constraints are a 400
      const events = await runtime.start({
        prompt: singlePrompt(body.prompt),
        params: samplingParams(body, body.logprobs),
        stop: stopStrings(body.stop),
        signal: sse?.signal ?? clientGone(reply),
        ...platformFields(request),
        ...requestContext(request),
        ...(grammar ? { grammar } : {}),
      });
      const id = completionId();
      const created = unixSeconds();
      const model = runtime.modelName;
      const wantLogprobs = body.logprobs !== undefined;

      if (!sse) {
        const logprobs = wantLogprobs ? new CompletionLogprobsBuilder(runtime.tokenizer) : undefined;
        const answer = await collectAnswer(events, logprobs);
        const out: CompletionResponse = {
          id,
          object: 'text_completion',
          created,
          model,
          choices: [
            {
              index: 0,
              text: answer.text,
              logprobs: logprobs?.value ?? null,
              finish_reason: answer.finishReason,
            },
          ],
          usage: answer.usage,
        };
        return out;
      }

      const includeUsage = body.stream_options?.include_usage === true;
      let offset = 0;
      await streamChunks(
        request,
        sse,
        events,
        {
          delta: (text, token, done) => {
            let logprobs = null;
            if (wantLogprobs && token) {
              const builder = new CompletionLogprobsBuilder(runtime.tokenizer, offset);
              builder.add(token);
              logprobs = builder.value;
            }
            offset += text.length;
            return {
              id,
              object: 'text_completion',
              created,
              model,
              choices: [
                {
                  index: 0,
                  text,
                  logprobs,
                  finish_reason: done ? openAiFinishReason(done.finishReason) : null,
                },
              ],
              ...(includeUsage ? { usage: null } : {}),
            };
          },
          usage: (usage) => ({ id, object: 'text_completion', created, model, choices: [], usage }),
        },
        { includeUsage, everyToken: wantLogprobs },
      );
      return reply;
    },
  );
};
