// The public request bodies (docs/architecture.md, Wire contracts), one zod definition shared
// by the edge (which validates) and the backend (which validates again and executes). Field
// names and ranges follow vLLM and OpenAI; the messages zod produces name the field and the
// allowed range.
import { z } from 'zod';
import { structuredOutputsSchema } from './structured-output.js';

/**
 * max_tokens when a request gives none, as vLLM's and OpenAI's completions have it. The one
 * place it is set: the backend's STRATA_DEFAULT_MAX_TOKENS defaults to it, and the schemas leave
 * max_tokens absent (the edge forwards bodies as validated), so that setting decides.
 */
export const DEFAULT_MAX_TOKENS = 16;

/** Sampling settings shared by /v1/generate and the OpenAI routes (OpenAI / vLLM names). */
export const samplingFields = {
  max_tokens: z
    .number()
    .int()
    .min(1)
    .max(1_000_000)
    .optional()
    .describe(
      `Output tokens at most; absent: the backend's STRATA_DEFAULT_MAX_TOKENS (${DEFAULT_MAX_TOKENS} unless set)`,
    ),
  min_tokens: z.number().int().min(0).max(1_000_000).optional(),
  temperature: z.number().min(0).max(100).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  top_k: z.number().int().min(-1).optional(),
  min_p: z.number().min(0).max(1).optional(),
  repetition_penalty: z.number().gt(0).max(100).optional(),
  frequency_penalty: z.number().min(-2).max(2).optional(),
  presence_penalty: z.number().min(-2).max(2).optional(),
  stop: z
    .union([z.string().min(1), z.array(z.string().min(1)).max(16)], {
      error: 'stop must be a non-empty string or a list of at most 16 non-empty strings',
    })
    .optional(),
  stop_token_ids: z.array(z.number().int().min(0)).max(64).optional(),
  seed: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  ignore_eos: z.boolean().optional(),
};

/** POST /v1/generate. Unknown fields are rejected: this API is ours, typos should fail. */
export const generateRequestSchema = z.strictObject({
  model: z.string().min(1).optional(),
  /** Text, or token ids used as they are. */
  prompt: z.union([z.string().min(1), z.array(z.number().int().min(0)).min(1)], {
    error: 'prompt must be a non-empty string or a non-empty list of token ids',
  }),
  ...samplingFields,
  /** Top-n logprobs per token (0 = the sampled token's only). */
  logprobs: z.number().int().min(0).max(20).optional(),
  stream: z.boolean().default(false),
  /** Lower is more urgent (as vLLM); the x-strata-priority header may set it too. */
  priority: z.number().int().min(-100).max(100).optional(),
  /** Structured output: exactly one of json (a schema), regex, choice, grammar (Lark) or json_object. */
  constraint: structuredOutputsSchema.optional(),
});
export type GenerateRequest = z.output<typeof generateRequestSchema>;

export const finishReasonSchema = z.enum(['stop', 'length', 'abort', 'timeout']);
export type FinishReason = z.output<typeof finishReasonSchema>;

export const usageSchema = z.object({ input_tokens: z.number().int(), output_tokens: z.number().int() });

/** SSE `data:` payloads of a /v1/generate stream, in order: token*, then done or error. */
export const generateTokenEventSchema = z.object({
  type: z.literal('token'),
  token: z.string(),
  id: z.number().int(),
  index: z.number().int(),
  logprob: z.number().optional(),
  top_logprobs: z.array(z.object({ id: z.number().int(), logprob: z.number() })).optional(),
});
export const generateDoneEventSchema = z.object({
  type: z.literal('done'),
  finish_reason: finishReasonSchema,
  /** The stop string that ended the output, when one did. */
  stop: z.string().optional(),
  /** Text released only at the end: held back as a possible stop-string prefix or an
   * unfinished character. Append it to the token texts. */
  text: z.string().optional(),
  usage: usageSchema,
});
export const generateErrorEventSchema = z.object({
  type: z.literal('error'),
  error: z.object({ code: z.string(), message: z.string(), type: z.string() }),
});

/** Non-streaming /v1/generate response. */
export const generateResponseSchema = z.object({
  id: z.string(),
  model: z.string(),
  text: z.string(),
  token_ids: z.array(z.number().int()),
  finish_reason: finishReasonSchema,
  stop: z.string().optional(),
  usage: usageSchema,
});
export type GenerateResponse = z.output<typeof generateResponseSchema>;

/** Every error response: {"error":{"code","message","type"}} (see errors.ts). */
export const errorResponseSchema = z.object({
  error: z.object({
    code: z.string(),
    message: z.string(),
    type: z.string(),
    details: z.unknown().optional(),
  }),
});

/** The route schemas' error responses: each listed status answers errorResponseSchema. */
export function errorResponses<const S extends readonly number[]>(
  ...statuses: S
): { [K in S[number]]: typeof errorResponseSchema } {
  return Object.fromEntries(statuses.map((status) => [status, errorResponseSchema])) as {
    [K in S[number]]: typeof errorResponseSchema;
  };
}

const count = z.number().int().min(0);

/**
 * GET /load on a backend: the compact load report the router polls (docs/architecture.md, Wire
 * contracts), cheaper than /metrics. The backend serializes with it; the router parses with it.
 */
export const loadReportSchema = z.object({
  model: z.string(),
  /** /health/ready's answer: model loaded, warmed up and not draining. */
  ready: z.boolean(),
  running: count,
  /** Queued in the engine, preempted ones included. */
  waiting: count,
  /** Admitted by the backend and not finished (running + waiting + not yet submitted). */
  live_requests: count,
  /** Used KV blocks / total, 0..1. */
  kv_usage: z.number().min(0).max(1),
  /** Blocks a new request can take: free ones plus cached ones no request holds (evictable). */
  kv_blocks_free: count,
  kv_blocks_total: count,
  /** When the report was taken (epoch ms, the backend's clock). */
  timestamp_ms: count,
});
export type LoadReport = z.output<typeof loadReportSchema>;
