// Tool calling on /v1/chat/completions: the request's tools into the prompt, the model's calls
// out of its text, in OpenAI's shapes.
//
// The wire format is Hermes' (Qwen2.5, Hermes, SmolLM3 and others): each call is
// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`. A chat template that reads
// `tools` itself gets them as a variable (and the history's tool_calls and tool messages as
// transformers passes them); any other template gets a system message that lists the tools
// and that format, tool calls written back in it and tool results as <tool_response> turns.
//
// tool_choice 'required' and a named function constrain the output to that format with the
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

/** What a request asks of its tools; undefined when the answer is plain text. */
export interface ToolPlan {
  tools: readonly Tool[];
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
    return { tools, mode: 'named', name, parallel: false };
  }
  return { tools, mode: choice, parallel };
}

/** One call's JSON body: {"name": <one of the tools>, "arguments": <its parameters>}. */
function callSchema(tools: readonly Tool[]): Record<string, unknown> {
  const one = (t: Tool) => ({
    type: 'object',
    properties: { name: { const: t.function.name }, arguments: t.function.parameters ?? { type: 'object' } },
    required: ['name', 'arguments'],
    additionalProperties: false,
  });
  return tools.length === 1 ? one(tools[0] as Tool) : { anyOf: tools.map(one) };
}

/** The grammar of a 'required' or named answer; undefined for 'auto'. */
export function toolGrammar(plan: ToolPlan): GrammarSpec | undefined {
  if (plan.mode === 'auto') return undefined;
  const tools = plan.mode === 'named' ? plan.tools.filter((t) => t.function.name === plan.name) : plan.tools;
  const call = `call: ${JSON.stringify(`${OPEN}\n`)} %json ${JSON.stringify(callSchema(tools))} ${JSON.stringify(`\n${CLOSE}`)}`;
  const start = plan.parallel ? 'start: call ("\\n" call)*' : 'start: call';
  return { kind: 'lark', data: `${start}\n${call}\n`, field: 'tools' };
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
 * Finds Hermes tool calls in the model's text as it streams: text that might still begin a
 * `<tool_call>` is held back; a call is released when its closing tag arrives, if its body is
 * JSON naming one of the tools (else the block stays plain content). finish() releases what is
 * left: an unclosed call (cut by max_tokens) as content, so nothing the model wrote is lost.
 */
export class ToolCallParser {
  #buffer = '';
  #inCall = false;
  /** Right after a call: whitespace before the next call is dropped, not content. */
  #afterCall = false;
  readonly #names: ReadonlySet<string>;

  constructor(tools: readonly Tool[]) {
    this.#names = new Set(tools.map((t) => t.function.name));
  }

  push(text: string): ToolStep {
    this.#buffer += text;
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
          const keep = heldPrefix(this.#buffer, OPEN);
          step.content += this.#buffer.slice(0, this.#buffer.length - keep);
          this.#buffer = this.#buffer.slice(this.#buffer.length - keep);
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
      const call = this.#parse(block.slice(OPEN.length, end));
      if (call) step.calls.push(call);
      else step.content += block;
    }
  }

  finish(): ToolStep {
    const content = this.#buffer;
    this.#buffer = '';
    this.#inCall = false;
    this.#afterCall = false;
    return { content, calls: [] };
  }

  #parse(body: string): ToolCall | undefined {
    let value: unknown;
    try {
      value = JSON.parse(body);
    } catch {
      return undefined;
    }
    if (typeof value !== 'object' || value === null) return undefined;
    const { name, arguments: args } = value as { name?: unknown; arguments?: unknown };
    if (typeof name !== 'string' || !this.#names.has(name)) return undefined;
    return {
      id: `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`,
      type: 'function',
      function: { name, arguments: JSON.stringify(args ?? {}) },
    };
  }
}

/** How many characters at the end of `text` could begin `tag`. */
function heldPrefix(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}
