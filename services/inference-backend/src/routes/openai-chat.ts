// POST /v1/chat/completions (OpenAI-compatible, as vLLM serves it): the messages rendered with
// the model's chat template (tokenizer_config.json), then generated like a completion. JSON, or
// SSE chunks (the first carries delta.role 'assistant') then [DONE]. Tools and tool calls are
// tool-calls.ts's; response_format and vLLM's structured-output fields constrain the answer.
import {
  type ChatCompletionRequest,
  type ChatCompletionResponse,
  chatCompletionRequestSchema,
  chatCompletionResponseSchema,
  checkStreamOptions,
  dropNullFields,
  type GrammarSpec,
  grammarOf,
  type OpenAiFinishReason,
  StrataError,
} from '@strata/common';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { SseStream } from '../http/sse.js';
import type { InferenceRuntime } from '../inference/runtime.js';
import type { ChatTemplate } from '../model/chat-template.js';
import { requestContext } from '../observability/request-context.js';
import type { OpenAiRouteOptions } from './openai-completions.js';
import {
  ChatLogprobsBuilder,
  chatCompletionId,
  collectAnswer,
  openAiErrors,
  openAiFinishReason,
  streamChunks,
  unixSeconds,
} from './openai-shared.js';
import { clientGone, platformFields, samplingParams, stopStrings } from './request-fields.js';
import {
  ToolCallParser,
  type ToolPlan,
  templateReadsTools,
  toolFormatOf,
  toolGrammar,
  toolPlan,
  toolPromptMessages,
} from './tool-calls.js';

/**
 * A call-constrained answer that made calls ends with 'tool_calls', except when tool_choice named
 * the function: OpenAI then says 'stop'.
 */
function toolFinishReason(plan: ToolPlan, reason: OpenAiFinishReason): OpenAiFinishReason {
  return reason === 'stop' && plan.mode !== 'named' ? 'tool_calls' : reason;
}

/** The request's one constraint: response_format (or vLLM's fields) or its tool choice, not both. */
function oneGrammar(
  format: GrammarSpec | undefined,
  tools: GrammarSpec | undefined,
): GrammarSpec | undefined {
  if (format && tools) {
    throw new StrataError(
      'STRATA_INVALID_GRAMMAR',
      `only one constraint per request: got ${format.field} and tools (tool_choice 'required' or a named function)`,
    );
  }
  return format ?? tools;
}

// One parsed template per loaded runtime (a reload brings a new runtime and a new template).
const templates = new WeakMap<InferenceRuntime, ChatTemplate>();

function chatTemplate(runtime: InferenceRuntime): ChatTemplate {
  let template = templates.get(runtime);
  if (!template) {
    template = runtime.chatTemplate(); // throws STRATA_NO_CHAT_TEMPLATE (400) when there is none
    templates.set(runtime, template);
  }
  return template;
}

/**
 * The prompt ids of a chat request. The rendered text already holds the special tokens the
 * template writes (usually `{{ bos_token }}` first), so it is encoded without adding any
 * (as transformers' apply_chat_template and vLLM do); BOS is then added only when the model's
 * config asks for it (add_bos_token) and the template did not already put it first, so a
 * prompt never starts with two BOS tokens. A rendered text too long for the context by its size
 * alone is refused before tokenizing (TextGenerator.checkPromptSize), against the request's
 * max_completion_tokens / max_tokens (else the default).
 */
export async function chatPrompt(
  runtime: InferenceRuntime,
  body: Pick<
    ChatCompletionRequest,
    'messages' | 'add_generation_prompt' | 'chat_template_kwargs' | 'max_tokens' | 'max_completion_tokens'
  > &
    Partial<Pick<ChatCompletionRequest, 'tools' | 'tool_choice' | 'parallel_tool_calls'>>,
  plan: ToolPlan | undefined = toolPlan(body, toolFormatOf(runtime.files.chatTemplate)),
): Promise<Int32Array> {
  // Content parts are joined with newlines, as vLLM does for text parts.
  const { messages, variables } = toolPromptMessages(
    body.messages,
    plan,
    templateReadsTools(runtime.files.chatTemplate),
  );
  const text = chatTemplate(runtime).render(messages, {
    addGenerationPrompt: body.add_generation_prompt,
    variables: { ...body.chat_template_kwargs, ...variables },
  });
  const maxTokens = runtime.maxTokens(body.max_completion_tokens ?? body.max_tokens);
  runtime.generator.checkPromptSize(text, maxTokens, { addSpecialTokens: false });
  const { tokenizer } = runtime;
  const ids = await tokenizer.encodeIds(text, { addSpecialTokens: false });
  const bos = tokenizer.bosTokenId;
  if (!tokenizer.files.addBosToken || bos === null || ids[0] === bos) return ids;
  const withBos = new Int32Array(ids.length + 1);
  withBos[0] = bos;
  withBos.set(ids, 1);
  return withBos;
}

/** chatPrompt's ids as an array. */
export async function chatPromptIds(
  runtime: InferenceRuntime,
  body: Parameters<typeof chatPrompt>[1],
): Promise<number[]> {
  return Array.from(await chatPrompt(runtime, body));
}

export const chatRoutes: FastifyPluginAsyncZod<OpenAiRouteOptions> = async (app, options) => {
  app.post(
    '/v1/chat/completions',
    {
      preValidation: dropNullFields,
      schema: {
        summary: 'OpenAI-compatible chat completion; SSE chunks when stream is true',
        body: chatCompletionRequestSchema,
        response: { 200: chatCompletionResponseSchema, ...openAiErrors },
      },
    },
    async (request, reply) => {
      const runtime = options.host.get();
      const body = request.body as ChatCompletionRequest; // no nulls left: dropNullFields ran first
      runtime.checkModel(body.model);
      checkStreamOptions(body);
      const plan = toolPlan(body, toolFormatOf(runtime.files.chatTemplate));
      const grammar = oneGrammar(grammarOf(body), plan && toolGrammar(plan)); // before any work: a 400
      const prompt = await chatPrompt(runtime, body, plan);
      const maxTokens = body.max_completion_tokens ?? body.max_tokens;
      const topLogprobs = body.logprobs ? (body.top_logprobs ?? 0) : undefined;
      const sse = body.stream ? new SseStream(reply, options.sseHeartbeatMs) : undefined;
      const events = await runtime.start({
        prompt,
        params: samplingParams({ ...body, max_tokens: maxTokens }, topLogprobs),
        stop: stopStrings(body.stop),
        signal: sse?.signal ?? clientGone(reply),
        ...platformFields(request),
        ...requestContext(request),
        ...(grammar ? { grammar } : {}),
      });
      const id = chatCompletionId();
      const created = unixSeconds();
      const model = runtime.modelName;

      if (!sse) {
        const logprobs = body.logprobs ? new ChatLogprobsBuilder(runtime.tokenizer) : undefined;
        const answer = await collectAnswer(events, logprobs);
        let message: ChatCompletionResponse['choices'][number]['message'] = {
          role: 'assistant',
          content: answer.text,
        };
        let finishReason = answer.finishReason;
        if (plan) {
          const parser = new ToolCallParser(plan.tools, plan.format);
          const found = parser.push(answer.text);
          const last = parser.finish();
          const content = found.content + last.content;
          const calls = [...found.calls, ...last.calls];
          if (calls.length > 0) {
            message = { role: 'assistant', content: content === '' ? null : content, tool_calls: calls };
            finishReason = toolFinishReason(plan, finishReason);
          }
        }
        const out: ChatCompletionResponse = {
          id,
          object: 'chat.completion',
          created,
          model,
          choices: [{ index: 0, message, logprobs: logprobs?.value ?? null, finish_reason: finishReason }],
          usage: answer.usage,
        };
        return out;
      }

      const includeUsage = body.stream_options?.include_usage === true;
      const tools = plan ? new ToolCallParser(plan.tools, plan.format) : undefined;
      let callIndex = 0;
      let sawCalls = false;
      const chunk = (choice: Record<string, unknown>) => ({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [{ index: 0, logprobs: null, finish_reason: null, ...choice }],
        ...(includeUsage ? { usage: null } : {}),
      });
      await streamChunks(
        request,
        sse,
        events,
        {
          opening: () => chunk({ delta: { role: 'assistant', content: '' } }),
          delta: (text, token, done) => {
            let logprobs = null;
            if (body.logprobs && token) {
              const builder = new ChatLogprobsBuilder(runtime.tokenizer);
              builder.add(token);
              logprobs = builder.value;
            }
            let delta: Record<string, unknown> = { content: text };
            let finish = done ? openAiFinishReason(done.finishReason) : null;
            if (tools) {
              const step = tools.push(text);
              if (done) {
                const last = tools.finish();
                step.content += last.content;
                step.calls.push(...last.calls);
              }
              const calls = step.calls.map((call) => ({ index: callIndex++, ...call }));
              delta = {
                ...(step.content !== '' ? { content: step.content } : {}),
                ...(calls.length > 0 ? { tool_calls: calls } : {}),
              };
              if (calls.length > 0) sawCalls = true;
              if (finish && sawCalls && plan) finish = toolFinishReason(plan, finish);
              if (!done && !logprobs && Object.keys(delta).length === 0) return undefined;
            }
            return chunk({ delta, logprobs, finish_reason: finish });
          },
          usage: (usage) => ({ id, object: 'chat.completion.chunk', created, model, choices: [], usage }),
        },
        { includeUsage, everyToken: body.logprobs },
      );
      return reply;
    },
  );
};
