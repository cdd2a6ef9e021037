// The OpenAI-compatible API on a real backend (port 0, real engine, tinystories-656k), driven
// by the official `openai` client, plus /openapi.json.
import { copyFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadNativeAddon } from '../src/native.js';
import { chatPromptIds } from '../src/routes/openai-chat.js';
import { json, startBackend, type TestBackend } from './support/backend.js';
import { modelPath, optionalModel } from './support/models.js';
import { readJsonFile, TempDirs } from './support/temp-model.js';

const tiny = optionalModel('tinystories-656k');
const grammarBuilt = loadNativeAddon().buildInfo().grammar;

const CHAT_TEMPLATE =
  "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" +
  '{% if add_generation_prompt %}assistant:{% endif %}';

const dirs = new TempDirs();
let plain: TestBackend; // tinystories-656k as shipped: no chat template
let chat: TestBackend; // the same weights with a chat template added
let client: OpenAI;
let chatClient: OpenAI;

/** tinystories-656k's files with tokenizer_config.json's chat_template set; weights symlinked. */
async function modelWithChatTemplate(): Promise<string> {
  const src = modelPath('tinystories-656k');
  const dir = await dirs.make('strata-chat-model-');
  for (const name of ['config.json', 'generation_config.json', 'tokenizer.json', 'special_tokens_map.json'])
    await copyFile(path.join(src, name), path.join(dir, name));
  await symlink(path.join(src, 'model.safetensors'), path.join(dir, 'model.safetensors'));
  const tokCfg = await readJsonFile(path.join(src, 'tokenizer_config.json'));
  await writeFile(
    path.join(dir, 'tokenizer_config.json'),
    JSON.stringify({ ...tokCfg, chat_template: CHAT_TEMPLATE }),
  );
  return dir;
}

beforeAll(async () => {
  plain = await startBackend({ STRATA_WARMUP: 'false' });
  chat = await startBackend({
    STRATA_WARMUP: 'false',
    STRATA_MODEL_DIR: await modelWithChatTemplate(),
    STRATA_SERVED_MODEL_NAME: 'tiny-chat',
    // One compute thread keeps a 400-token stream running long after a client leaves it.
    STRATA_ENGINE_THREADS: '1',
  });
  client = new OpenAI({ baseURL: `${plain.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  chatClient = new OpenAI({ baseURL: `${chat.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
afterAll(async () => {
  await plain?.close();
  await chat?.close();
  await dirs.removeAll();
});

const post = (backend: TestBackend, route: string, body: unknown) =>
  fetch(`${backend.url}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** What the engine itself produces for a greedy request. */
const engineText = (backend: TestBackend, prompt: string | number[], maxTokens: number) =>
  backend.host.get().generator.complete({
    prompt,
    params: { maxTokens, temperature: 0, ignoreEos: true },
  });

async function apiError(promise: Promise<unknown>): Promise<APIError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof APIError) return err;
    throw err;
  }
  throw new Error('expected an APIError');
}

const greedy = {
  model: 'tinystories-656k',
  prompt: 'Once upon a time',
  max_tokens: 24,
  temperature: 0,
  ignore_eos: true,
};

describe.skipIf(!tiny.path)(`POST /v1/completions${tiny.skipped}`, () => {
  it('returns the engine text with OpenAI shape and usage', async () => {
    const direct = await engineText(plain, greedy.prompt, 24);
    const res = await client.completions.create(greedy);
    expect(res.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
    expect(res.object).toBe('text_completion');
    expect(res.model).toBe('tinystories-656k');
    expect(Number.isInteger(res.created)).toBe(true);
    expect(res.choices).toEqual([{ index: 0, text: direct.text, logprobs: null, finish_reason: 'length' }]);
    expect(res.usage).toEqual({
      prompt_tokens: direct.done.usage.inputTokens,
      completion_tokens: 24,
      total_tokens: direct.done.usage.inputTokens + 24,
    });
  });

  it('streams chunks whose texts add up to the engine text, then usage and [DONE]', async () => {
    const direct = await engineText(plain, greedy.prompt, 24);
    const stream = await client.completions.create({
      ...greedy,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const usage = chunks.at(-1);
    expect(usage?.choices).toEqual([]);
    expect(usage?.usage).toEqual({
      prompt_tokens: direct.done.usage.inputTokens,
      completion_tokens: 24,
      total_tokens: direct.done.usage.inputTokens + 24,
    });
    const textChunks = chunks.slice(0, -1);
    expect(textChunks.map((c) => c.choices[0]?.text).join('')).toBe(direct.text);
    expect(textChunks.at(-1)?.choices[0]?.finish_reason).toBe('length');
    expect(textChunks.slice(0, -1).every((c) => c.choices[0]?.finish_reason === null)).toBe(true);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(textChunks.every((c) => c.object === 'text_completion' && c.usage === null)).toBe(true);
  });

  it('sends the raw SSE format: data: {json} chunks then data: [DONE]', async () => {
    const res = await post(plain, '/v1/completions', { ...greedy, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const text = await res.text();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const chunks = text.split('\n\n').filter((c) => c !== '');
    expect(chunks.every((c) => c.startsWith('data: '))).toBe(true);
    expect(text).not.toContain('"usage"'); // no include_usage: no usage anywhere
  });

  it('accepts token ids, a one-string list, nulls and unknown fields', async () => {
    const ids = await plain.host.get().tokenizer.encode(greedy.prompt);
    const direct = await engineText(plain, ids, 8);
    const base = { model: 'tinystories-656k', max_tokens: 8, temperature: 0, ignore_eos: true };
    const byIds = await json(await post(plain, '/v1/completions', { ...base, prompt: ids }));
    expect(byIds.choices[0].text).toBe(direct.text);
    const byList = await json(
      await post(plain, '/v1/completions', {
        ...base,
        prompt: [greedy.prompt],
        stop: null,
        seed: null,
        suffix: null,
        stream: null,
        logprobs: null,
        // The 'off' values of fields this server does not implement pass too.
        logit_bias: {},
        response_format: { type: 'text' },
        some_future_field: { x: 1 },
      }),
    );
    expect(byList.choices[0].text).toBe(direct.text);
  });

  it('stops at a stop string with finish_reason stop', async () => {
    const direct = await engineText(plain, greedy.prompt, 24);
    const word = direct.text.trim().split(/\s+/)[2] as string;
    const res = await client.completions.create({ ...greedy, stop: [word] });
    expect(res.choices[0]?.finish_reason).toBe('stop');
    expect(res.choices[0]?.text).toBe(direct.text.slice(0, direct.text.indexOf(word)));
  });

  it('returns logprobs in the completions shape', async () => {
    const res = await client.completions.create({ ...greedy, max_tokens: 5, logprobs: 2 });
    const lp = res.choices[0]?.logprobs;
    expect(lp?.tokens).toHaveLength(5);
    expect(lp?.token_logprobs).toHaveLength(5);
    expect(lp?.text_offset).toHaveLength(5);
    expect(lp?.text_offset?.[0]).toBe(0);
    expect(lp?.top_logprobs).toHaveLength(5);
    for (const lpv of lp?.token_logprobs ?? []) expect(lpv).toBeLessThanOrEqual(0);
  });

  it('uses STRATA_DEFAULT_MAX_TOKENS when a request gives none, on every route', async () => {
    const five = await startBackend({
      STRATA_WARMUP: 'false',
      STRATA_MODEL_DIR: await modelWithChatTemplate(),
      STRATA_DEFAULT_MAX_TOKENS: '5',
    });
    try {
      const fiveClient = new OpenAI({ baseURL: `${five.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const model = (await fiveClient.models.list()).data[0]?.id ?? '';
      const completion = await fiveClient.completions.create({
        model,
        prompt: 'Hi',
        ignore_eos: true,
      } as never);
      expect(completion.usage?.completion_tokens).toBe(5);
      const chatted = await fiveClient.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'Hi' }],
        ignore_eos: true,
      } as never);
      expect(chatted.usage?.completion_tokens).toBe(5);
      const generated = await json(await post(five, '/v1/generate', { prompt: 'Hi', ignore_eos: true }));
      expect(generated.usage.output_tokens).toBe(5);
      // null is absent, as OpenAI clients send it.
      const nulled = await json(
        await post(five, '/v1/completions', { prompt: 'Hi', max_tokens: null, ignore_eos: true }),
      );
      expect(nulled.usage.completion_tokens).toBe(5);
    } finally {
      await five.close();
    }
  });

  it('uses max_tokens 16 by default', async () => {
    const res = await client.completions.create({
      model: 'tinystories-656k',
      prompt: 'Hi',
      ignore_eos: true,
    } as never);
    expect(res.usage?.completion_tokens).toBe(16);
    expect(res.choices[0]?.finish_reason).toBe('length');
  });
});

describe.skipIf(!tiny.path)(`finish_reason mapping and cancellation${tiny.skipped}`, () => {
  it("reports a request cut by the backend's deadline as finish_reason length", async () => {
    const strict = await startBackend({ STRATA_WARMUP: 'false', STRATA_REQUEST_TIMEOUT_MS: '5' });
    try {
      const strictClient = new OpenAI({ baseURL: `${strict.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const res = await strictClient.completions.create({ ...greedy, max_tokens: 500 });
      expect(res.choices[0]?.finish_reason).toBe('length');
      expect(res.usage?.completion_tokens).toBeLessThan(500);
    } finally {
      await strict.close();
    }
  });

  it('a client leaving a chat stream ends its sequence exactly once and frees its blocks', async () => {
    // Whether the abort beats the 400th token depends on the machine (the client reads ahead and
    // this model is fast); that an SSE disconnect aborts the sequence is asserted deterministically
    // in generate.test.ts. Here: the request ends exactly once, as abort or length, and leaks nothing.
    const finished = () => {
      const s = chat.host.get().engine.stats();
      return s.finishedAbort + s.finishedLength + s.finishedStop;
    };
    const finishedBefore = finished();
    const controller = new AbortController();
    const stream = await chatClient.chat.completions.create(
      {
        model: 'tiny-chat',
        messages: [{ role: 'user', content: 'Tell me a long story' }],
        max_tokens: 400,
        ignore_eos: true,
        stream: true,
      } as never,
      { signal: controller.signal },
    );
    // Leave as soon as the response has started: the client reads ahead, so waiting for chunks
    // could let the whole 400-token answer be generated before the abort arrives.
    controller.abort();
    try {
      for await (const _chunk of stream as unknown as AsyncIterable<unknown>) {
        // whatever was buffered before the abort; the client then ends or throws
      }
    } catch {
      // the client's abort error
    }
    const runtime = chat.host.get();
    for (let i = 0; i < 200 && (runtime.liveRequests > 0 || runtime.engine.stats().kvBlocksUsed > 0); i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(runtime.liveRequests).toBe(0);
    expect(runtime.engine.stats().kvBlocksUsed).toBe(0);
    expect(finished()).toBe(finishedBefore + 1);
  });
});

describe.skipIf(!tiny.path)(`POST /v1/chat/completions${tiny.skipped}`, () => {
  const messages = [
    { role: 'system' as const, content: 'You tell stories.' },
    {
      role: 'user' as const,
      content: [
        { type: 'text' as const, text: 'Tell me' },
        { type: 'text' as const, text: 'a story' },
      ],
    },
  ];
  const rendered = 'system: You tell stories.\nuser: Tell me\na story\nassistant:';

  it('renders the template with one BOS and returns the engine text', async () => {
    const runtime = chat.host.get();
    const ids = await chatPromptIds(runtime, { messages, add_generation_prompt: true });
    const bos = runtime.tokenizer.bosTokenId;
    expect(bos).not.toBeNull();
    expect(ids[0]).toBe(bos);
    expect(ids.filter((id) => id === bos)).toHaveLength(1);
    // The template writes BOS itself: the rendered text is encoded without special tokens, as
    // apply_chat_template does; encoding it the plain-prompt way would start with two BOS.
    const text = `<|start_story|>${rendered}`;
    expect(ids).toEqual(await runtime.tokenizer.encode(text, { addSpecialTokens: false }));
    expect((await runtime.tokenizer.encode(text)).slice(0, 2)).toEqual([bos, bos]);

    const direct = await engineText(chat, ids, 20);
    const res = await chatClient.chat.completions.create({
      model: 'tiny-chat',
      messages,
      max_completion_tokens: 20,
      temperature: 0,
      ignore_eos: true,
      // The 'off' values of what this server does not implement are accepted.
      tools: [],
      tool_choice: 'none',
      response_format: { type: 'text' },
    } as never);
    expect(res.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(res.object).toBe('chat.completion');
    expect(res.model).toBe('tiny-chat');
    expect(res.choices).toEqual([
      {
        index: 0,
        message: { role: 'assistant', content: direct.text },
        logprobs: null,
        finish_reason: 'length',
      },
    ]);
    expect(res.usage).toEqual({
      prompt_tokens: ids.length,
      completion_tokens: 20,
      total_tokens: ids.length + 20,
    });
  });

  it('streams with the openai client: role first, content adding up to the engine text, usage last', async () => {
    const runtime = chat.host.get();
    const ids = await chatPromptIds(runtime, { messages, add_generation_prompt: true });
    const direct = await engineText(chat, ids, 20);
    const stream = await chatClient.chat.completions.create({
      model: 'tiny-chat',
      messages,
      max_tokens: 20,
      temperature: 0,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    } as never);
    const chunks = [];
    for await (const chunk of stream as unknown as AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>)
      chunks.push(chunk);
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id.startsWith('chatcmpl-'))).toBe(
      true,
    );
    const usage = chunks.at(-1);
    expect(usage?.choices).toEqual([]);
    expect(usage?.usage).toEqual({
      prompt_tokens: ids.length,
      completion_tokens: 20,
      total_tokens: ids.length + 20,
    });
    const content = chunks.slice(0, -1);
    expect(content.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(direct.text);
    expect(content.slice(1).every((c) => c.choices[0]?.delta.role === undefined)).toBe(true);
    expect(content.at(-1)?.choices[0]?.finish_reason).toBe('length');
  });

  it('returns chat logprobs when asked', async () => {
    const res = await chatClient.chat.completions.create({
      model: 'tiny-chat',
      messages,
      max_tokens: 4,
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
      ignore_eos: true,
    } as never);
    const content = res.choices[0]?.logprobs?.content ?? [];
    expect(content).toHaveLength(4);
    for (const entry of content) {
      expect(entry.top_logprobs).toHaveLength(3);
      expect(entry.bytes).toEqual([...Buffer.from(entry.token, 'utf8')]);
    }
  });

  it('answers 400 STRATA_NO_CHAT_TEMPLATE for a model without a template', async () => {
    const err = await apiError(
      client.chat.completions.create({
        model: 'tinystories-656k',
        messages: [{ role: 'user', content: 'hi' }],
      }),
    );
    expect(err.status).toBe(400);
    expect(err.code).toBe('STRATA_NO_CHAT_TEMPLATE');
    expect(err.type).toBe('invalid_request');
    // The served name, never the server's model directory.
    expect((err.error as { message: string }).message).toBe(
      'The model tinystories-656k has no chat template (tokenizer_config.json has no chat_template); ' +
        'use /v1/completions with a plain prompt instead',
    );
  });
});

describe.skipIf(!tiny.path)(`GET /v1/models${tiny.skipped}`, () => {
  it('lists the served model', async () => {
    const models = [];
    for await (const m of client.models.list()) models.push(m);
    expect(models).toEqual([
      {
        id: 'tinystories-656k',
        object: 'model',
        created: expect.any(Number),
        owned_by: 'strata',
        root: 'tinystories-656k',
        max_model_len: plain.host.get().maxModelLen,
        // Beside OpenAI's fields: how the model is stored (config.json's torch_dtype here).
        format: 'huggingface',
        quantization: 'float32',
        display_name: null,
      },
    ]);
    const chatModels = await json(await fetch(`${chat.url}/v1/models`));
    expect(chatModels.data[0].id).toBe('tiny-chat');
  });
});

describe.skipIf(!tiny.path)(`bad input${tiny.skipped}`, () => {
  const cases: [string, string, unknown, number, string, RegExp][] = [
    [
      'n=2',
      '/v1/completions',
      { ...greedy, n: 2 },
      400,
      'STRATA_INVALID_REQUEST',
      /n.*only n=1 is supported/,
    ],
    [
      'echo=true',
      '/v1/completions',
      { ...greedy, echo: true },
      400,
      'STRATA_INVALID_REQUEST',
      /echo=true is not supported/,
    ],
    [
      'negative max_tokens',
      '/v1/completions',
      { ...greedy, max_tokens: -1 },
      400,
      'STRATA_INVALID_REQUEST',
      /max_tokens.*>=1/,
    ],
    [
      'two prompts',
      '/v1/completions',
      { ...greedy, prompt: ['a', 'b'] },
      400,
      'STRATA_INVALID_REQUEST',
      /prompt must be/,
    ],
    [
      'logprobs 6',
      '/v1/completions',
      { ...greedy, logprobs: 6 },
      400,
      'STRATA_INVALID_REQUEST',
      /logprobs.*<=5/,
    ],
    [
      'unknown model',
      '/v1/completions',
      { ...greedy, model: 'gpt-4' },
      404,
      'STRATA_MODEL_NOT_FOUND',
      /"gpt-4" is not served here; this backend serves "tinystories-656k"/,
    ],
    [
      'stream_options without stream',
      '/v1/completions',
      { ...greedy, stream_options: { include_usage: true } },
      400,
      'STRATA_INVALID_PARAM',
      /stream_options is only allowed when stream is true/,
    ],
    [
      'logit_bias',
      '/v1/completions',
      { ...greedy, logit_bias: { '50': 10 } },
      400,
      'STRATA_INVALID_REQUEST',
      /logit_bias is not supported: send \{\} or leave it out/,
    ],
    [
      'suffix',
      '/v1/completions',
      { ...greedy, suffix: 'The end.' },
      400,
      'STRATA_INVALID_REQUEST',
      /suffix is not supported/,
    ],
    [
      'prompt_logprobs',
      '/v1/completions',
      { ...greedy, prompt_logprobs: 1 },
      400,
      'STRATA_INVALID_REQUEST',
      /prompt_logprobs is not supported/,
    ],
    [
      // tinystories-656k's vocabulary has no '{' (nor byte pieces): it cannot write JSON at all.
      'a JSON schema this model cannot write',
      '/v1/completions',
      { ...greedy, guided_json: { type: 'object' } },
      400,
      // An addon built without cargo refuses every constraint instead.
      grammarBuilt ? 'STRATA_INVALID_GRAMMAR' : 'STRATA_GRAMMAR_UNAVAILABLE',
      grammarBuilt
        ? /guided_json: the constraint admits no output with this model/
        : /built without llguidance/,
    ],
    [
      'an unknown response_format',
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'yaml' } },
      400,
      'STRATA_INVALID_REQUEST',
      /response_format.type must be 'text', 'json_object' or 'json_schema'/,
    ],
    [
      'a tool_choice naming a function tools does not list',
      '/v1/chat/completions',
      {
        messages: [{ role: 'user', content: 'hi' }],
        tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
        tool_choice: { type: 'function', function: { name: 'g' } },
      },
      400,
      'STRATA_INVALID_REQUEST',
      /tool_choice names the function 'g', which tools does not list/,
    ],
    [
      'a tool_choice without tools',
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'hi' }], tool_choice: 'auto' },
      400,
      'STRATA_INVALID_REQUEST',
      /tool_choice "auto" needs tools: the request lists none/,
    ],
    [
      'wrong role',
      '/v1/chat/completions',
      { messages: [{ role: 'robot', content: 'hi' }] },
      400,
      'STRATA_INVALID_REQUEST',
      /role must be 'system', 'user', 'assistant' or 'tool'/,
    ],
    [
      'no messages',
      '/v1/chat/completions',
      { messages: [] },
      400,
      'STRATA_INVALID_REQUEST',
      /messages must hold at least one message/,
    ],
    [
      'n=3 in chat',
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'hi' }], n: 3 },
      400,
      'STRATA_INVALID_REQUEST',
      /only n=1 is supported/,
    ],
    [
      'image part',
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] },
      400,
      'STRATA_INVALID_REQUEST',
      /content must be a string or a list of/,
    ],
    [
      'unknown chat model',
      '/v1/chat/completions',
      { model: 'gpt-4', messages: [{ role: 'user', content: 'hi' }] },
      404,
      'STRATA_MODEL_NOT_FOUND',
      /"gpt-4" is not served here/,
    ],
  ];
  it.each(cases)('%s', async (_name, route, body, status, code, message) => {
    const backend = route === '/v1/completions' ? plain : chat;
    const res = await post(backend, route, body);
    expect(res.status).toBe(status);
    const out = await json(res);
    expect(out.error.code).toBe(code);
    expect(out.error.type).toBe('invalid_request');
    expect(out.error.message).toMatch(message);
    const health = await fetch(`${backend.url}/health/live`);
    expect(health.status).toBe(200);
  });

  it('surfaces a 4xx through the openai client', async () => {
    const err = await apiError(client.completions.create({ ...greedy, n: 2 }));
    expect(err.status).toBe(400);
    expect(err.code).toBe('STRATA_INVALID_REQUEST');
    expect(err.message).toMatch(/only n=1 is supported/);
  });
});

describe.skipIf(!tiny.path)(`GET /openapi.json${tiny.skipped}`, () => {
  it('documents the inference routes with their request bodies', async () => {
    const res = await fetch(`${plain.url}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = await json(res);
    expect(doc.openapi).toBe('3.1.0');
    for (const route of ['/v1/generate', '/v1/completions', '/v1/chat/completions']) {
      const schema = doc.paths[route]?.post?.requestBody?.content?.['application/json']?.schema;
      expect(schema?.type, route).toBe('object');
    }
    const completions = doc.paths['/v1/completions'].post.requestBody.content['application/json'].schema;
    expect(completions.required).toEqual(['prompt']);
    expect(Object.keys(completions.properties)).toEqual(
      expect.arrayContaining([
        'model',
        'prompt',
        'max_tokens',
        'n',
        'stream',
        'stream_options',
        'logprobs',
        'echo',
        'top_k',
      ]),
    );
    const chatBody = doc.paths['/v1/chat/completions'].post.requestBody.content['application/json'].schema;
    expect(chatBody.required).toEqual(['messages']);
    expect(doc.paths['/v1/models'].get.responses['200']).toBeDefined();
    expect(doc.paths['/openapi.json']).toBeUndefined();
    // The base routes (plain JSON schemas) still work next to the zod ones.
    expect((await fetch(`${plain.url}/health/live`)).status).toBe(200);
  });
});
