// Structured output on the default model (SmolLM2-135M-Instruct Q4_1, the real engine behind a
// real backend on port 0) through the official `openai` client and /v1/generate: every
// constrained output parses and validates against its schema (fixed schemas, and random ones
// from a seeded generator), regex and choice constraints hold, bad constraints are 400s that
// name the problem before anything is queued, and an object cut by max_tokens says "length".
// Tool calling: 'required' and a named function are constrained to the tools' schemas and come
// back as tool_calls (streamed as tool_calls deltas); the history's calls and results render.

import { seededRandom } from '@strata/common/testing';
import type OpenAI from 'openai';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { loadNativeAddon } from '../src/native.js';
import { startOpenAiBackend, type TestBackend } from './support/backend.js';
import { smollm2Gguf } from './support/models.js';

const smol = smollm2Gguf();
// An addon built without cargo has no grammar engine: skipped here, unless CI requires it.
const grammarBuilt = loadNativeAddon().buildInfo().grammar || process.env.STRATA_REQUIRE_GRAMMAR === '1';
const skipped = smol.skipped || (grammarBuilt ? '' : ' (skipped: the addon was built without llguidance)');
const MODEL = 'SmolLM2-135M-Instruct.Q4_1';

/** A random zod schema with bounded sizes, so that a 135M model's output ends within max_tokens. */
function randomSchema(next: () => number, depth = 0): z.ZodType {
  const pick = Math.floor(next() * (depth >= 2 ? 5 : 7));
  switch (pick) {
    case 0:
      return z.string().max(1 + Math.floor(next() * 12));
    case 1:
      return z
        .number()
        .int()
        .min(-5)
        .max(5 + Math.floor(next() * 100));
    case 2:
      return z.boolean();
    case 3:
      return z.enum(
        ['red', 'green', 'blue', 'cyan'].slice(0, 2 + Math.floor(next() * 3)) as [string, ...string[]],
      );
    case 4:
      return z.null();
    case 5:
      return z.array(randomSchema(next, depth + 1)).max(1 + Math.floor(next() * 2));
    default: {
      const shape: Record<string, z.ZodType> = {};
      const n = 1 + Math.floor(next() * 3);
      for (let i = 0; i < n; i++) shape[`k${i}`] = randomSchema(next, depth + 1);
      return z.strictObject(shape);
    }
  }
}

const Person = z.strictObject({
  name: z.string().max(20),
  age: z.number().int().min(0).max(120),
  pets: z.array(z.enum(['cat', 'dog', 'fish'])).max(3),
});

describe.skipIf(!smol.path || !grammarBuilt)(`structured output on SmolLM2-135M-Instruct${skipped}`, () => {
  let backend: TestBackend;
  let client: OpenAI;
  beforeAll(async () => {
    ({ backend, client } = await startOpenAiBackend(smol.path as string));
  }, 60_000);
  afterAll(async () => {
    await backend?.close();
  });

  const post = (path: string, body: unknown) =>
    fetch(`${backend.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it("parses into a zod schema with the openai client's chat.completions.parse", async () => {
    const r = await client.chat.completions.parse({
      model: MODEL,
      messages: [{ role: 'user', content: 'Describe a person called Ann who has a cat, as JSON.' }],
      response_format: zodResponseFormat(Person, 'person'),
      temperature: 0,
      max_tokens: 120,
    });
    const choice = r.choices[0];
    expect(choice?.finish_reason).toBe('stop');
    expect(Person.parse(choice?.message.parsed)).toEqual(choice?.message.parsed);
  }, 60_000);

  it('keeps random schemas: every output parses and validates', async () => {
    const next = seededRandom(20261125);
    for (let i = 0; i < 6; i++) {
      const schema = z.strictObject({ value: randomSchema(next) });
      const r = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'Give an example value as JSON.' }],
        response_format: {
          type: 'json_schema',
          json_schema: { name: `random_${i}`, schema: z.toJSONSchema(schema), strict: true },
        },
        temperature: 1,
        seed: i,
        max_tokens: 200,
      });
      const choice = r.choices[0];
      const content = choice?.message.content ?? '';
      expect(choice?.finish_reason, `schema ${i}: ${content}`).toBe('stop');
      const parsed = schema.safeParse(JSON.parse(content));
      expect(parsed.success, `schema ${i}: ${content} ${JSON.stringify(z.toJSONSchema(schema))}`).toBe(true);
    }
  }, 240_000);

  it('streams a json_object answer whose chunks join into one JSON object', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'user', content: 'Reply with a JSON object whose one key, "greeting", says hello.' },
      ],
      response_format: { type: 'json_object' },
      temperature: 0,
      max_tokens: 300,
      stream: true,
    });
    let text = '';
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(finish, text).toBe('stop');
    const value = JSON.parse(text) as unknown;
    expect(typeof value === 'object' && value !== null && !Array.isArray(value)).toBe(true);
  }, 60_000);

  it('holds a regex and a choice list on /v1/generate, and a choice on /v1/completions', async () => {
    const date = await post('/v1/generate', {
      prompt: 'The date today is',
      max_tokens: 30,
      temperature: 1,
      seed: 3,
      constraint: { regex: ' 20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]' },
    });
    expect(date.status).toBe(200);
    const d = (await date.json()) as { text: string; finish_reason: string };
    expect(d.text).toMatch(/^ 20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]$/);
    expect(d.finish_reason).toBe('stop');

    const choices = ['yes', 'no', 'it says "maybe"\n'];
    const pick = await post('/v1/generate', {
      prompt: 'Is the sky blue? Answer:',
      max_tokens: 20,
      temperature: 1,
      seed: 5,
      constraint: { choice: choices },
    });
    const p = (await pick.json()) as { text: string; finish_reason: string };
    expect(choices).toContain(p.text);
    expect(p.finish_reason).toBe('stop');

    const completion = await client.completions.create({
      model: MODEL,
      prompt: 'Is water wet? Answer:',
      max_tokens: 10,
      temperature: 0,
      // vLLM's field, as its clients send it in extra_body.
      ...({ guided_choice: [' yes', ' no'] } as object),
    });
    expect([' yes', ' no']).toContain(completion.choices[0]?.text);
  }, 60_000);

  it('ends a constrained object cut by max_tokens with finish_reason length', async () => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Describe a person as JSON.' }],
      response_format: zodResponseFormat(Person, 'person'),
      temperature: 0,
      max_tokens: 4,
    });
    expect(r.choices[0]?.finish_reason).toBe('length');
    expect(() => JSON.parse(r.choices[0]?.message.content ?? '')).toThrow();
  }, 60_000);

  it.each([
    [
      'an unsupported keyword',
      {
        response_format: {
          type: 'json_schema',
          json_schema: { name: 's', schema: { type: 'array', uniqueItems: true } },
        },
      },
      /response_format: Unimplemented keys: \["uniqueItems"\]/,
    ],
    [
      'an unsatisfiable schema',
      {
        response_format: {
          type: 'json_schema',
          json_schema: { name: 's', schema: { type: 'integer', minimum: 5, maximum: 1 } },
        },
      },
      /Unsatisfiable schema: minimum \(5\) is greater than maximum \(1\)/,
    ],
    ['a regex that does not parse', { structured_outputs: { regex: '([0-9]' } }, /structured_outputs: /],
    ['a grammar with an undefined rule', { guided_grammar: 'start: foo' }, /guided_grammar: /],
    ['a schema string that is not JSON', { guided_json: '{"type": ' }, /guided_json is not valid JSON/],
    [
      'two constraints at once',
      { response_format: { type: 'json_object' }, guided_regex: '[0-9]+' },
      /only one constraint per request: got response_format and guided_regex/,
    ],
  ])('refuses %s with a 400 that names it', async (_what, fields, message) => {
    const before = backend.host.get().engine.stats().numSteps;
    const response = await post('/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 5,
      ...fields,
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('STRATA_INVALID_GRAMMAR');
    expect(body.error.message).toMatch(message);
    expect(backend.host.get().engine.stats().numSteps).toBe(before); // nothing ran
  });

  it('refuses a bad constraint field shape in the request schema', async () => {
    const response = await post('/v1/generate', { prompt: 'x', constraint: { regex: 'a', choice: ['b'] } });
    expect(response.status).toBe(400);
    expect(await response.text()).toMatch(/exactly one of json, regex, choice, grammar or json_object/);
  });

  const Weather = z.strictObject({ city: z.string().max(20), unit: z.enum(['celsius', 'fahrenheit']) });
  const Clock = z.strictObject({ timezone: z.string().max(30) });
  const tools = [
    {
      type: 'function' as const,
      function: {
        name: 'get_weather',
        description: 'The weather in a city',
        parameters: z.toJSONSchema(Weather) as Record<string, unknown>,
      },
    },
    {
      type: 'function' as const,
      function: {
        name: 'get_time',
        description: 'The time in a timezone',
        parameters: z.toJSONSchema(Clock) as Record<string, unknown>,
      },
    },
  ];
  const ask = [{ role: 'user' as const, content: 'What is the weather in Paris?' }];

  it("answers tool_choice 'required' with calls that name a tool and fit its parameters", async () => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: ask,
      tools,
      tool_choice: 'required',
      temperature: 0,
      max_tokens: 150,
    });
    const choice = r.choices[0];
    expect(choice?.finish_reason).toBe('tool_calls');
    const calls = choice?.message.tool_calls ?? [];
    expect(calls.length).toBeGreaterThan(0);
    for (const call of calls) {
      if (call.type !== 'function') throw new Error(`unexpected call type ${call.type}`);
      expect(call.id).toMatch(/^call_/);
      const args = JSON.parse(call.function.arguments) as unknown;
      const schema = call.function.name === 'get_weather' ? Weather : Clock;
      expect(schema.safeParse(args).success, call.function.arguments).toBe(true);
    }
  }, 60_000);

  it('calls a named function once, parsed by the openai client (zodFunction), finish_reason stop', async () => {
    const r = await client.chat.completions.parse({
      model: MODEL,
      messages: [{ role: 'user', content: 'What time is it in Tokyo?' }],
      tools: [
        zodFunction({ name: 'get_time', parameters: Clock }),
        zodFunction({ name: 'get_weather', parameters: Weather }),
      ],
      tool_choice: { type: 'function', function: { name: 'get_time' } },
      temperature: 0,
      max_tokens: 100,
    });
    const choice = r.choices[0];
    expect(choice?.finish_reason).toBe('stop');
    expect(choice?.message.tool_calls).toHaveLength(1);
    const call = choice?.message.tool_calls?.[0];
    if (call?.type !== 'function') throw new Error(`expected a function call, got ${JSON.stringify(call)}`);
    expect(call.function.name).toBe('get_time');
    expect(Clock.parse(call.function.parsed_arguments)).toEqual(call.function.parsed_arguments);
  }, 60_000);

  it('streams tool calls as tool_calls deltas', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: ask,
      tools,
      tool_choice: 'required',
      parallel_tool_calls: false,
      temperature: 0,
      max_tokens: 150,
      stream: true,
    });
    const calls: { index: number; id?: string; name?: string; arguments: string }[] = [];
    let content = '';
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta;
      content += delta?.content ?? '';
      for (const c of delta?.tool_calls ?? []) {
        const known = calls[c.index];
        if (known) known.arguments += c.function?.arguments ?? '';
        else
          calls[c.index] = {
            index: c.index,
            id: c.id,
            name: c.function?.name,
            arguments: c.function?.arguments ?? '',
          };
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(finish).toBe('tool_calls');
    expect(content).toBe('');
    expect(calls).toHaveLength(1);
    expect(calls[0]?.id).toMatch(/^call_/);
    expect(['get_weather', 'get_time']).toContain(calls[0]?.name);
    expect(() => JSON.parse(calls[0]?.arguments ?? '')).not.toThrow();
  }, 60_000);

  it('renders a history of calls and results, and answers it in text with tool_choice none', async () => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: [
        ...ask,
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_1',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21, "sky": "sunny"}' },
      ],
      tools,
      tool_choice: 'none',
      temperature: 0,
      max_tokens: 40,
    });
    const choice = r.choices[0];
    expect(choice?.message.tool_calls ?? []).toHaveLength(0);
    expect(choice?.message.content?.length).toBeGreaterThan(0);
  }, 60_000);

  it.each([
    [
      'a named function that tools does not list',
      { tools, tool_choice: { type: 'function', function: { name: 'get_stock' } } },
      'STRATA_INVALID_REQUEST',
      /tool_choice names the function 'get_stock', which tools does not list \(it lists get_weather, get_time\)/,
    ],
    ['a tool_choice without tools', { tool_choice: 'required' }, 'STRATA_INVALID_REQUEST', /needs tools/],
    [
      'a function listed twice',
      { tools: [tools[0], tools[0]] },
      'STRATA_INVALID_REQUEST',
      /the function name 'get_weather' is given twice/,
    ],
    [
      'parameters with an unsupported keyword',
      {
        tools: [
          { type: 'function', function: { name: 'f', parameters: { type: 'array', uniqueItems: true } } },
        ],
        tool_choice: 'required',
      },
      'STRATA_INVALID_GRAMMAR',
      /tools: .*Unimplemented keys: \["uniqueItems"\]/,
    ],
    [
      'a required tool call and a response_format at once',
      { tools, tool_choice: 'required', response_format: { type: 'json_object' } },
      'STRATA_INVALID_GRAMMAR',
      /only one constraint per request: got response_format and tools/,
    ],
    [
      'a tool message without the id of its call',
      { messages: [{ role: 'tool', content: 'x' }] },
      'STRATA_INVALID_REQUEST',
      /a tool message needs the tool_call_id/,
    ],
  ])('refuses %s with a 400 that names it', async (_what, fields, code, message) => {
    const before = backend.host.get().engine.stats().numSteps;
    const response = await post('/v1/chat/completions', {
      model: MODEL,
      messages: ask,
      max_tokens: 5,
      ...fields,
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe(code);
    expect(body.error.message).toMatch(message);
    expect(backend.host.get().engine.stats().numSteps).toBe(before);
  });

  it('never failed a constraint: the engine and /metrics count masks and no constraint errors', async () => {
    const stats = backend.host.get().engine.stats();
    expect(stats.constraintMasks).toBeGreaterThan(0);
    expect(stats.constraintErrors).toBe(0);
    const text = await (await fetch(`${backend.url}/metrics`)).text();
    const value = (name: string) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1]);
    expect(value('strata_backend_constraint_masks_total')).toBe(stats.constraintMasks);
    expect(value('strata_backend_constraint_mask_seconds_total')).toBeGreaterThan(0);
    expect(value('strata_backend_constraint_wait_seconds_total')).toBeGreaterThanOrEqual(0);
    expect(value('strata_backend_constraint_errors_total')).toBe(0);
  });
});

// Templates that teach their own call format (as Llama 3.1's and Mistral's do), set with
// STRATA_CHAT_TEMPLATE on the same weights: the answer is constrained to that format and parsed
// from it.
const LLAMA_TEMPLATE =
  '{{ bos_token }}{% if tools %}system: Given the following functions, respond with a JSON for a function call. ' +
  'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\n' +
  '{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}' +
  "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" +
  '{% if add_generation_prompt %}assistant: {% endif %}';
const MISTRAL_TEMPLATE =
  '{{ bos_token }}{% for m in messages %}{% if m.role == "user" %}' +
  '{% if loop.last and tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}' +
  '[INST]{{ m.content }}[/INST]{% elif m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}' +
  '{% else %}{{ m.content }}{% endif %}{% endfor %}';

describe.each([
  ['Llama 3 JSON', LLAMA_TEMPLATE],
  ['Mistral', MISTRAL_TEMPLATE],
])(`tool calls in a template's own format (%s)${skipped}`, (_format, template) => {
  let backend: TestBackend;
  let client: OpenAI;
  beforeAll(async () => {
    if (!smol.path || !grammarBuilt) return;
    ({ backend, client } = await startOpenAiBackend(smol.path, { STRATA_CHAT_TEMPLATE: template }));
  }, 60_000);
  afterAll(async () => {
    await backend?.close();
  });

  it.skipIf(!smol.path || !grammarBuilt)(
    'answers tool_choice required with parsed calls, streamed and not',
    async () => {
      const Clock = z.strictObject({ timezone: z.string().max(30) });
      const request = {
        model: MODEL,
        messages: [{ role: 'user' as const, content: 'What time is it in Tokyo?' }],
        tools: [
          {
            type: 'function' as const,
            function: { name: 'get_time', parameters: z.toJSONSchema(Clock) as Record<string, unknown> },
          },
        ],
        tool_choice: 'required' as const,
        temperature: 0,
        max_tokens: 80,
      };
      const r = await client.chat.completions.create(request);
      const choice = r.choices[0];
      expect(choice?.finish_reason).toBe('tool_calls');
      const call = choice?.message.tool_calls?.[0];
      if (call?.type !== 'function')
        throw new Error(`expected a function call, got ${JSON.stringify(choice?.message)}`);
      expect(call.function.name).toBe('get_time');
      expect(Clock.safeParse(JSON.parse(call.function.arguments)).success, call.function.arguments).toBe(
        true,
      );

      const stream = await client.chat.completions.create({ ...request, stream: true });
      const names: string[] = [];
      let finish: string | null | undefined;
      for await (const chunk of stream) {
        for (const c of chunk.choices[0]?.delta?.tool_calls ?? [])
          if (c.function?.name) names.push(c.function.name);
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      expect(names).toEqual(['get_time']);
      expect(finish).toBe('tool_calls');
    },
    60_000,
  );
});
