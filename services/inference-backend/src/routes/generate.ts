// POST /v1/generate (docs/architecture.md, Wire contracts): JSON, or SSE with token events,
// then done (or error once the stream has started).
import {
  errorResponses,
  type GenerateResponse,
  generateRequestSchema,
  generateResponseSchema,
  grammarOfConstraint,
  StrataError,
} from '@strata/common';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { SseStream } from '../http/sse.js';
import type { ModelHost } from '../inference/model-host.js';
import { requestContext } from '../observability/request-context.js';
import { clientGone, platformFields, samplingParams, stopStrings } from './request-fields.js';

export interface GenerateRouteOptions {
  host: ModelHost;
  sseHeartbeatMs: number;
}

const errors = errorResponses(400, 401, 404, 429, 503);

export const generateRoutes: FastifyPluginAsyncZod<GenerateRouteOptions> = async (app, options) => {
  app.post(
    '/v1/generate',
    {
      schema: {
        summary: 'Generate text; SSE when stream is true',
        body: generateRequestSchema,
        response: { 200: generateResponseSchema, ...errors },
      },
    },
    async (request, reply) => {
      const runtime = options.host.get();
      const body = request.body;
      runtime.checkModel(body.model);
      const sse = body.stream ? new SseStream(reply, options.sseHeartbeatMs) : undefined;
      const grammar = grammarOfConstraint(body.constraint); // before any work: two constraints are a 400
      const events = await runtime.start({
        prompt: body.prompt,
        params: samplingParams(body, body.logprobs),
        stop: stopStrings(body.stop),
        signal: sse?.signal ?? clientGone(reply),
        ...platformFields(request),
        ...requestContext(request),
        ...(grammar ? { grammar } : {}),
      });

      if (!sse) {
        const out: GenerateResponse = {
          id: request.id,
          model: runtime.modelName,
          text: '',
          token_ids: [],
          finish_reason: 'abort',
          usage: { input_tokens: 0, output_tokens: 0 },
        };
        for await (const event of events) {
          out.text += event.text;
          if (event.type === 'token') out.token_ids.push(event.id);
          else {
            out.finish_reason = event.finishReason;
            out.usage = { input_tokens: event.usage.inputTokens, output_tokens: event.usage.outputTokens };
            if (event.stop !== undefined) out.stop = event.stop;
          }
        }
        return out;
      }

      sse.open();
      try {
        for await (const event of events) {
          if (event.type === 'token') {
            await sse.send({
              type: 'token',
              token: event.text,
              id: event.id,
              index: event.index,
              ...(event.logprob !== undefined ? { logprob: event.logprob } : {}),
              ...(event.topLogprobs
                ? { top_logprobs: event.topLogprobs.map((t) => ({ id: t.token, logprob: t.logprob })) }
                : {}),
            });
          } else {
            await sse.send({
              type: 'done',
              finish_reason: event.finishReason,
              ...(event.stop !== undefined ? { stop: event.stop } : {}),
              ...(event.text !== '' ? { text: event.text } : {}),
              usage: { input_tokens: event.usage.inputTokens, output_tokens: event.usage.outputTokens },
            });
          }
        }
      } catch (err) {
        const failure =
          err instanceof StrataError ? err : new StrataError('STRATA_ENGINE_ERROR', (err as Error).message);
        request.log.error({ err }, 'stream failed after it started');
        await sse.send({ type: 'error', error: failure.toBody().error });
      } finally {
        sse.end();
      }
      return reply;
    },
  );
};
