// Tool calling on /v1/chat/completions: the request's tools into the prompt, the model's calls
// out of its text, in OpenAI's shapes.
//
// A chat template that reads `tools` itself gets them as a variable (and the history's tool_calls
// and tool messages as transformers passes them), and the model answers in the format that
// template teaches, recognised from the template's text (toolFormatOf):
//  - Hermes (Qwen2.5, Hermes, SmolLM3, ...): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
//    per call;
//  - Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`;
//  - Llama 3.x's JSON tool calling: the whole answer is `{"name": ..., "parameters": {...}}`.
// Any other template (SmolLM2's) gets a system message that lists the tools and the Hermes
// format, tool calls written back in it and tool results as <tool_response> turns.
//
// tool_choice 'required' and a named function constrain the output to the format with the
// tools' parameter schemas (a Lark grammar with %json bodies), so every call parses and names
// a tool; 'auto' leaves the model free and finds calls in its text, as vLLM does; 'none' leaves
// tools out of the prompt.
import { randomUUID } from 'node:crypto';
import {
  type ChatCompletionRequest,
  type ChatMessageInput,
  type GrammarSpec,
  StrataError,
  type Tool,
  type ToolCall,
} from '@strata/common';
import type { ChatMessage } from '../model/chat-template.js';

export const OPEN = '<tool_call>';
export const CLOSE = '</tool_call>';
const MISTRAL = '[TOOL_CALLS]';
const PYTHON_TAG = '<|python_tag|>';

/** How a model writes its calls: its template's convention (see the top of this file). */
export type ToolFormat = 'hermes' | 'mistral' | 'llama3-json';

/** The call format a chat template teaches; Hermes' for a template that knows no tools. */
export function toolFormatOf(template: string | null): ToolFormat {
  if (template === null || !templateReadsTools(template) || template.includes(OPEN)) return 'hermes';
  if (template.includes(MISTRAL)) return 'mistral';
  if (template.includes('"parameters"')) return 'llama3-json';
  return 'hermes';
}

/** What a request asks of its tools; undefined when the answer is plain text. */
export interface ToolPlan {
  tools: readonly Tool[];
  format: ToolFormat;
  mode: 'auto' | 'required' | 'named';
  /** 'named': the one function the answer must call. */
  name?: string;
  /** 'required': more than one call allowed. */
  parallel: boolean;
}

const invalid = (message: string) => new StrataError('STRATA_INVALID_REQUEST', message);

/** The request's tool plan. Throws STRATA_INVALID_REQUEST for a choice its tools cannot meet. */
export function toolPlan(
  body: Pick<ChatCompletionRequest, 'tools' | 'tool_choice' | 'parallel_tool_calls'>,
  format: ToolFormat = 'hermes',
): ToolPlan | undefined {
  const tools = body.tools ?? [];
  const choice = body.tool_choice ?? (tools.length > 0 ? 'auto' : 'none');
  const names = tools.map((t) => t.function.name);
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice !== undefined) throw invalid(`tools: the function name '${twice}' is given twice`);
  if (choice === 'none') return undefined;
  if (tools.length === 0) {
    throw invalid(`tool_choice ${JSON.stringify(choice)} needs tools: the request lists none`);
  }
  const parallel = body.parallel_tool_calls ?? true;
  if (typeof choice === 'object') {
    const name = choice.function.name;
    if (!names.includes(name)) {
      throw invalid(
        `tool_choice names the function '${name}', which tools does not list (it lists ${names.join(', ')})`,
      );
    }
    return { tools, format, mode: 'named', name, parallel: false };
  }
  // Llama 3's JSON tool calling has one call per answer.
  return { tools, format, mode: choice, parallel: parallel && format !== 'llama3-json' };
}

/** The key of a call's arguments in `format`. */
const argumentsKey = (format: ToolFormat) => (format === 'llama3-json' ? 'parameters' : 'arguments');

/** One call's JSON body: {"name": <one of the tools>, "arguments": <its parameters>}. */
function callSchema(tools: readonly Tool[], format: ToolFormat): Record<string, unknown> {
  const key = argumentsKey(format);
  const one = (t: Tool) => ({
    type: 'object',
    properties: { name: { const: t.function.name }, [key]: t.function.parameters ?? { type: 'object' } },
    required: ['name', key],
    additionalProperties: false,
  });
  return tools.length === 1 ? one(tools[0] as Tool) : { anyOf: tools.map(one) };
}

/** The grammar of a 'required' or named answer, in the plan's format; undefined for 'auto'. */
export function toolGrammar(plan: ToolPlan): GrammarSpec | undefined {
  if (plan.mode === 'auto') return undefined;
  const tools = plan.mode === 'named' ? plan.tools.filter((t) => t.function.name === plan.name) : plan.tools;
  const call = callSchema(tools, plan.format);
  let data: string;
  if (plan.format === 'mistral') {
    const list = { type: 'array', items: call, minItems: 1, ...(plan.parallel ? {} : { maxItems: 1 }) };
    data = `start: ${JSON.stringify(MISTRAL)} %json ${JSON.stringify(list)}\n`;
  } else if (plan.format === 'llama3-json') {
    data = `start: %json ${JSON.stringify(call)}\n`;
  } else {
    const line = `call: ${JSON.stringify(`${OPEN}\n`)} %json ${JSON.stringify(call)} ${JSON.stringify(`\n${CLOSE}`)}`;
    data = `${plan.parallel ? 'start: call ("\\n" call)*' : 'start: call'}\n${line}\n`;
  }
  return { kind: 'lark', data, field: 'tools' };
}

const contentText = (m: ChatMessageInput): string =>
  m.content === undefined || m.content === null
    ? ''
    : typeof m.content === 'string'
      ? m.content
      : m.content.map((part) => part.text).join('\n');

/** A call's arguments as an object for a template (OpenAI sends them as JSON text). */
function argumentsValue(call: ToolCall): unknown {
  try {
    return JSON.parse(call.function.arguments);
  } catch {
    return call.function.arguments;
  }
}

const hermesCall = (call: ToolCall) =>
  `${OPEN}\n${JSON.stringify({ name: call.function.name, arguments: argumentsValue(call) })}\n${CLOSE}`;

function toolsSystemText(tools: readonly Tool[]): string {
  const listed = tools.map((t) => JSON.stringify({ type: 'function', function: t.function })).join('\n');
  return (
    'You may call one or more functions to assist with the user query. The functions you can call are listed ' +
    `within <tools></tools>:\n<tools>\n${listed}\n</tools>\n\nTo call a function, reply with a JSON object ` +
    `with the function's name and arguments within ${OPEN}${CLOSE} tags:\n${OPEN}\n` +
    `{"name": <function-name>, "arguments": <args-json-object>}\n${CLOSE}`
  );
}

/** Whether a chat template renders `tools` itself (transformers' convention). */
export function templateReadsTools(template: string | null): boolean {
  return template !== null && /\btools\b/.test(template);
}

/**
 * The messages (and template variables) to render. Without a plan (no tools, or tool_choice
 * 'none'), tool turns of the history are still written in the Hermes format.
 */
export function toolPromptMessages(
  messages: readonly ChatMessageInput[],
  plan: ToolPlan | undefined,
  nativeTools: boolean,
): { messages: ChatMessage[]; variables: Record<string, unknown> } {
  if (nativeTools) {
    return {
      messages: messages.map((m) => ({
        role: m.role,
        content: contentText(m),
        ...(m.tool_calls
          ? {
              tool_calls: m.tool_calls.map((c) => ({
                type: 'function' as const,
                function: { name: c.function.name, arguments: argumentsValue(c) },
              })),
            }
          : {}),
        ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
      })),
      variables: plan ? { tools: plan.tools } : {},
    };
  }
  const out: ChatMessage[] = messages.map((m) => {
    if (m.role === 'tool')
      return { role: 'user', content: `<tool_response>\n${contentText(m)}\n</tool_response>` };
    if (m.role === 'assistant' && m.tool_calls?.length) {
      const text = contentText(m);
      return {
        role: 'assistant',
        content: [text, ...m.tool_calls.map(hermesCall)].filter((s) => s !== '').join('\n'),
      };
    }
    return { role: m.role, content: contentText(m) };
  });
  if (plan) {
    const system = toolsSystemText(plan.tools);
    const first = out[0];
    if (first?.role === 'system') out[0] = { role: 'system', content: `${first.content}\n\n${system}` };
    else out.unshift({ role: 'system', content: system });
  }
  return { messages: out, variables: {} };
}

/** What the parser releases for one piece of output text. */
export interface ToolStep {
  /** Text that is plain content. */
  content: string;
  /** Calls completed by this piece. */
  calls: ToolCall[];
}

/**
 * Finds tool calls in the model's text as it streams, in the plan's format, and releases the rest
 * as content; nothing the model wrote is lost (a block that does not parse, or names no tool,
 * stays content).
 *  - Hermes: text that might still begin a `<tool_call>` is held back; a call is released when
 *    its closing tag arrives; whitespace between calls is dropped.
 *  - Mistral: text up to `[TOOL_CALLS]` is content; the list after it is parsed at the end.
 *  - Llama 3 JSON: an answer that starts (after whitespace or <|python_tag|>) with `{` is held
 *    and parsed at the end as one call; any other answer is content.
 * finish() releases what is left: an unclosed call (cut by max_tokens) as content.
 */
export class ToolCallParser {
  #buffer = '';
  #inCall = false;
  /** Right after a Hermes call: whitespace before the next call is dropped, not content. */
  #afterCall = false;
  /** Llama 3 JSON: whether the answer began as a call (undefined while it cannot tell). */
  #answerIsCall: boolean | undefined;
  readonly #names: ReadonlySet<string>;
  readonly #format: ToolFormat;

  constructor(tools: readonly Tool[], format: ToolFormat = 'hermes') {
    this.#names = new Set(tools.map((t) => t.function.name));
    this.#format = format;
  }

  push(text: string): ToolStep {
    this.#buffer += text;
    if (this.#format === 'mistral') return this.#pushUntil(MISTRAL);
    if (this.#format === 'llama3-json') return this.#pushLlama();
    return this.#pushHermes();
  }

  finish(): ToolStep {
    const rest = this.#buffer;
    this.#buffer = '';
    const wasCall = this.#inCall || this.#answerIsCall === true;
    this.#inCall = false;
    this.#afterCall = false;
    if (!wasCall || this.#format === 'hermes') return { content: rest, calls: [] };
    const calls =
      this.#format === 'mistral' ? this.#parseList(rest.slice(MISTRAL.length)) : this.#parseLlama(rest);
    return calls ? { content: '', calls } : { content: rest, calls: [] };
  }

  #pushHermes(): ToolStep {
    const step: ToolStep = { content: '', calls: [] };
    for (;;) {
      if (!this.#inCall && this.#afterCall) {
        const rest = this.#buffer.trimStart();
        if (rest === '') return step; // only whitespace so far: it may separate two calls
        if (rest.startsWith(OPEN) || OPEN.startsWith(rest)) this.#buffer = rest;
        this.#afterCall = false;
      }
      if (!this.#inCall) {
        const at = this.#buffer.indexOf(OPEN);
        if (at < 0) {
          step.content += this.#release(OPEN);
          return step;
        }
        step.content += this.#buffer.slice(0, at);
        this.#buffer = this.#buffer.slice(at);
        this.#inCall = true;
      }
      const end = this.#buffer.indexOf(CLOSE);
      if (end < 0) return step;
      const block = this.#buffer.slice(0, end + CLOSE.length);
      this.#buffer = this.#buffer.slice(end + CLOSE.length);
      this.#inCall = false;
      this.#afterCall = true;
      const call = this.#call(block.slice(OPEN.length, end), 'arguments');
      if (call) step.calls.push(call);
      else step.content += block;
    }
  }

  /** Content until `marker`; from the marker on, everything is held for finish(). */
  #pushUntil(marker: string): ToolStep {
    if (this.#inCall) return { content: '', calls: [] };
    const at = this.#buffer.indexOf(marker);
    if (at < 0) return { content: this.#release(marker), calls: [] };
    const content = this.#buffer.slice(0, at);
    this.#buffer = this.#buffer.slice(at);
    this.#inCall = true;
    return { content, calls: [] };
  }

  #pushLlama(): ToolStep {
    if (this.#answerIsCall === undefined) {
      let rest = this.#buffer.trimStart();
      if (rest.startsWith(PYTHON_TAG)) rest = rest.slice(PYTHON_TAG.length).trimStart();
      if (rest === '' || PYTHON_TAG.startsWith(rest)) return { content: '', calls: [] };
      this.#answerIsCall = rest.startsWith('{');
    }
    if (this.#answerIsCall) return { content: '', calls: [] };
    const content = this.#buffer;
    this.#buffer = '';
    return { content, calls: [] };
  }

  /** The buffer but for a tail that could begin `tag`, which stays held. */
  #release(tag: string): string {
    const keep = heldPrefix(this.#buffer, tag);
    const out = this.#buffer.slice(0, this.#buffer.length - keep);
    this.#buffer = this.#buffer.slice(this.#buffer.length - keep);
    return out;
  }

  #parseList(text: string): ToolCall[] | undefined {
    const value = parseJson(text);
    if (!Array.isArray(value) || value.length === 0) return undefined;
    const calls = value.map((v) => this.#callOf(v, 'arguments'));
    return calls.every((c) => c !== undefined) ? (calls as ToolCall[]) : undefined;
  }

  #parseLlama(text: string): ToolCall[] | undefined {
    let body = text.trimStart();
    if (body.startsWith(PYTHON_TAG)) body = body.slice(PYTHON_TAG.length);
    const value = parseJson(body);
    const key =
      typeof value === 'object' && value !== null && !('parameters' in value) ? 'arguments' : 'parameters';
    const call = this.#callOf(value, key);
    return call ? [call] : undefined;
  }

  #call(body: string, key: string): ToolCall | undefined {
    return this.#callOf(parseJson(body), key);
  }

  #callOf(value: unknown, key: string): ToolCall | undefined {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
    const record = value as Record<string, unknown>;
    const name = record.name;
    if (typeof name !== 'string' || !this.#names.has(name)) return undefined;
    return {
      id: `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`,
      type: 'function',
      function: { name, arguments: JSON.stringify(record[key] ?? {}) },
    };
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** How many characters at the end of `text` could begin `tag`. */
function heldPrefix(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}
