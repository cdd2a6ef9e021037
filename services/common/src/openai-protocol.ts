// The OpenAI-compatible bodies (POST /v1/completions, POST /v1/chat/completions, GET
// /v1/models), as vLLM serves them: OpenAI's fields plus vLLM's sampling extras (top_k, min_p,
// repetition_penalty, ignore_eos, min_tokens, ...). Unknown fields are accepted and ignored,
// because OpenAI clients send fields this server has no use for; fields whose values it cannot
// honour (n > 1, echo, logit_bias, tools, ...) are rejected with a message that says
// so. As in OpenAI's own schema, every optional field may be null, meaning absent: the routes
// drop top-level nulls (dropNullFields) before validating.
import { z } from 'zod';
import { StrataError } from './errors.js';
import { samplingFields } from './protocol.js';
import { guidedFields, responseFormatSchema, structuredOutputsSchema } from './structured-output.js';

/**
 * preValidation hook for the OpenAI routes, at the edge and at the backend alike: OpenAI
 * clients send `null` for fields they leave unset (stop, seed, max_tokens, ...); top-level
 * nulls are treated as absent, as OpenAI and vLLM do.
 */
export async function dropNullFields(request: { body: unknown }): Promise<void> {
  const body = request.body;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return;
  const record = body as Record<string, unknown>;
  for (const key of Object.keys(record)) if (record[key] === null) delete record[key];
}

/** Each field may also be null (OpenAI's schema allows it for every optional field). */
function nullable<T extends Record<string, z.ZodType>>(fields: T): { [K in keyof T]: z.ZodNullable<T[K]> } {
  return Object.fromEntries(Object.entries(fields).map(([key, field]) => [key, field.nullable()])) as {
    [K in keyof T]: z.ZodNullable<T[K]>;
  };
}

/** A request type as the routes see it, after dropNullFields: no field is null. */
type WithoutNulls<T> = { [K in keyof T]: Exclude<T[K], null> };

/** OpenAI and vLLM fields that change the output and that this server does not implement. */
const refused = (field: string, what: string) => `${field} is not supported: ${what}`;
/** Refused whatever its value. */
const refusedAlways = (field: string, what: string) => z.never({ error: refused(field, what) }).optional();
/** Refused unless empty. */
const refusedList = (field: string, what: string) =>
  z
    .array(z.unknown())
    .max(0, { error: refused(field, what) })
    .optional();
/** Refused unless 'none'. */
const onlyNone = (field: string, what: string) =>
  z.literal('none', { error: refused(field, `${what}; only 'none'`) }).optional();
const refusedFields = {
  logit_bias: z
    .record(z.string(), z.unknown())
    .refine((bias) => Object.keys(bias).length === 0, {
      error: refused('logit_bias', 'send {} or leave it out'),
    })
    .optional(),
  prompt_logprobs: refusedAlways('prompt_logprobs', 'logprobs cover the generated tokens only'),
};

/** Structured output (structured-output.ts): OpenAI's response_format and vLLM's fields. */
const constraintFields = {
  response_format: responseFormatSchema.optional(),
  structured_outputs: structuredOutputsSchema.optional(),
  ...guidedFields,
};

/** Fields both OpenAI routes share. */
const commonFields = nullable({
  model: z.string().min(1).optional(),
  ...samplingFields,
  ...refusedFields,
  ...constraintFields,
  n: z.literal(1, { error: 'only n=1 is supported: send one request per completion you want' }).optional(),
  stream: z.boolean().default(false),
  stream_options: z
    .looseObject({
      /** Adds a last chunk with usage (and usage: null on the others). */
      include_usage: z.boolean().optional(),
    })
    .optional(),
  user: z.string().optional(),
  /** vLLM's priority: lower is more urgent; the x-strata-priority header may set it too. */
  priority: z.number().int().min(-100).max(100).optional(),
});

const promptError =
  'prompt must be a non-empty string, a list of exactly one string, or a non-empty list of token ids';

/** POST /v1/completions. */
export const completionRequestSchema = z.looseObject({
  ...commonFields,
  prompt: z.union(
    [
      z.string().min(1),
      z.array(z.string().min(1)).length(1),
      z.array(z.number().int().min(0)).min(1),
      z.array(z.array(z.number().int().min(0)).min(1)).length(1),
    ],
    { error: promptError },
  ),
  ...nullable({
    max_tokens: samplingFields.max_tokens,
    /** Top-n logprobs per token (0 = the sampled token's only). */
    logprobs: z.number().int().min(0).max(5).optional(),
    echo: z
      .literal(false, { error: 'echo=true is not supported: the response holds the completion only' })
      .optional(),
    best_of: z
      .literal(1, { error: 'only best_of=1 is supported: send one request per completion you want' })
      .optional(),
    suffix: z
      .literal('', { error: refused('suffix', 'the completion only continues the prompt') })
      .optional(),
  }),
});
export type CompletionRequest = WithoutNulls<z.output<typeof completionRequestSchema>>;

export const chatContentPartSchema = z.looseObject({
  type: z.literal('text', { error: "only content parts of type 'text' are supported" }),
  text: z.string(),
});

/** A tool call as OpenAI writes it in an assistant message (arguments: a JSON text). */
export const toolCallSchema = z.looseObject({
  id: z.string().min(1),
  type: z.literal('function', { error: "a tool call's type must be 'function'" }),
  function: z.looseObject({ name: z.string().min(1), arguments: z.string() }),
});
export type ToolCall = z.output<typeof toolCallSchema>;

export const chatMessageSchema = z
  .looseObject({
    role: z.enum(['system', 'user', 'assistant', 'tool'], {
      error: "role must be 'system', 'user', 'assistant' or 'tool'",
    }),
    /** Absent or null only on an assistant message that holds tool_calls. */
    content: z
      .union([z.string(), z.array(chatContentPartSchema)], {
        error: "content must be a string or a list of {type: 'text', text} parts",
      })
      .nullable()
      .optional(),
    name: z.string().optional(),
    /** An assistant message's calls of the request's tools. */
    tool_calls: z.array(toolCallSchema).optional(),
    /** A tool message: the id of the call it answers. */
    tool_call_id: z.string().optional(),
  })
  .superRefine((m, ctx) => {
    if (
      (m.content === undefined || m.content === null) &&
      !(m.role === 'assistant' && m.tool_calls?.length)
    ) {
      ctx.addIssue({
        code: 'custom',
        message: 'content is required, except on an assistant message with tool_calls',
      });
    }
    if (m.role === 'tool' && m.tool_call_id === undefined) {
      ctx.addIssue({
        code: 'custom',
        message: 'a tool message needs the tool_call_id of the call it answers',
      });
    }
  });
export type ChatMessageInput = z.output<typeof chatMessageSchema>;

export const toolSchema = z.looseObject({
  type: z.literal('function', { error: "a tool's type must be 'function'" }),
  function: z.looseObject({
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, {
      error: 'a function name must be 1-64 letters, digits, underscores or dashes',
    }),
    description: z.string().optional(),
    /** A JSON schema of the arguments object; absent: any object. */
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullable().optional(),
  }),
});
export type Tool = z.output<typeof toolSchema>;

export const toolChoiceSchema = z.union(
  [
    z.enum(['none', 'auto', 'required']),
    z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string().min(1) }) }),
  ],
  { error: "tool_choice must be 'none', 'auto', 'required' or {type: 'function', function: {name}}" },
);
export type ToolChoice = z.output<typeof toolChoiceSchema>;

/** POST /v1/chat/completions. */
export const chatCompletionRequestSchema = z.looseObject({
  ...commonFields,
  messages: z.array(chatMessageSchema).min(1, { error: 'messages must hold at least one message' }),
  ...nullable({
    /** Deprecated by OpenAI in favour of max_completion_tokens; either works, the latter wins. */
    max_tokens: samplingFields.max_tokens,
    max_completion_tokens: samplingFields.max_tokens,
    logprobs: z.boolean().default(false),
    top_logprobs: z.number().int().min(0).max(20).optional(),
    /** vLLM: end the prompt with the opening of an assistant turn (default true). */
    add_generation_prompt: z.boolean().default(true),
    /** vLLM: more variables for the chat template. */
    chat_template_kwargs: z.record(z.string(), z.unknown()).optional(),
    /** Functions the model may call (tool-calls.ts in the backend renders and parses them). */
    tools: z.array(toolSchema).max(128, { error: 'tools may list at most 128 functions' }).optional(),
    /** 'auto' when tools are given (the model decides), else 'none'. */
    tool_choice: toolChoiceSchema.optional(),
    /** With tool_choice 'required': several calls in one answer (default true). */
    parallel_tool_calls: z.boolean().optional(),
    functions: refusedList('functions', 'the deprecated functions field; send tools instead'),
    function_call: onlyNone('function_call', 'the deprecated function_call field; send tool_choice instead'),
  }),
});
export type ChatCompletionRequest = WithoutNulls<z.output<typeof chatCompletionRequestSchema>>;

// Responses. finish_reason is 'stop' or 'length', 'tool_calls' when the answer calls tools, or
// 'abort' for a request cancelled in the engine, as vLLM reports it.
export const openAiFinishReasonSchema = z.enum(['stop', 'length', 'abort', 'tool_calls']);
export type OpenAiFinishReason = z.output<typeof openAiFinishReasonSchema>;

export const openAiUsageSchema = z.object({
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  total_tokens: z.number().int(),
});
export type OpenAiUsage = z.output<typeof openAiUsageSchema>;

export const completionLogprobsSchema = z.object({
  tokens: z.array(z.string()),
  token_logprobs: z.array(z.number()),
  top_logprobs: z.array(z.record(z.string(), z.number())).nullable(),
  text_offset: z.array(z.number().int()),
});
export type CompletionLogprobs = z.output<typeof completionLogprobsSchema>;

export const completionResponseSchema = z.object({
  id: z.string(),
  object: z.literal('text_completion'),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(
    z.object({
      index: z.number().int(),
      text: z.string(),
      logprobs: completionLogprobsSchema.nullable(),
      finish_reason: openAiFinishReasonSchema.nullable(),
    }),
  ),
  usage: openAiUsageSchema,
});
export type CompletionResponse = z.output<typeof completionResponseSchema>;

const chatTopLogprobSchema = z.object({
  token: z.string(),
  logprob: z.number(),
  bytes: z.array(z.number().int()).nullable(),
});
export const chatLogprobsSchema = z.object({
  content: z.array(chatTopLogprobSchema.extend({ top_logprobs: z.array(chatTopLogprobSchema) })),
});
export type ChatLogprobs = z.output<typeof chatLogprobsSchema>;

export const chatCompletionResponseSchema = z.object({
  id: z.string(),
  object: z.literal('chat.completion'),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(
    z.object({
      index: z.number().int(),
      message: z.object({
        role: z.literal('assistant'),
        /** null when the answer is only tool calls. */
        content: z.string().nullable(),
        tool_calls: z.array(toolCallSchema).optional(),
      }),
      logprobs: chatLogprobsSchema.nullable(),
      finish_reason: openAiFinishReasonSchema.nullable(),
    }),
  ),
  usage: openAiUsageSchema,
});
export type ChatCompletionResponse = z.output<typeof chatCompletionResponseSchema>;

export const modelCardSchema = z.object({
  id: z.string(),
  object: z.literal('model'),
  created: z.number().int(),
  owned_by: z.string(),
  root: z.string(),
  max_model_len: z.number().int(),
});
export const modelListSchema = z.object({ object: z.literal('list'), data: z.array(modelCardSchema) });
export type ModelList = z.output<typeof modelListSchema>;

/** Rejects a request whose stream_options come without stream, as OpenAI does. */
export function checkStreamOptions(body: { stream: boolean; stream_options?: unknown }): void {
  if (!body.stream && body.stream_options !== undefined) {
    throw new StrataError('STRATA_INVALID_PARAM', 'stream_options is only allowed when stream is true');
  }
}
