// POST /v1/generate on a real backend (port 0, real engine, tinystories-656k).
import { identityHeaders, testIdentityKey } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, readSse, startBackend, type TestBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');

let backend: TestBackend;
const identityKey = testIdentityKey();
beforeAll(async () => {
  backend = await startBackend({ STRATA_WARMUP: 'false', STRATA_IDENTITY_KEYS: identityKey.env });
});
afterAll(() => backend.close());

const post = (body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${backend.url}/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

const greedy = { prompt: 'Once upon a time', max_tokens: 30, temperature: 0, ignore_eos: true };

describe.skipIf(!tiny.path)(`POST /v1/generate${tiny.skipped}`, () => {
  it('returns the engine text as JSON', async () => {
    const res = await post(greedy);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toMatch(/\S/);
    const body = await json(res);
    expect(body).toMatchObject({
      model: 'tinystories-656k',
      finish_reason: 'length',
      usage: { output_tokens: 30 },
    });
    expect(body.token_ids).toHaveLength(30);
    const direct = await backend.host.get().generator.complete({
      prompt: greedy.prompt,
      params: { maxTokens: 30, temperature: 0, ignoreEos: true },
    });
    expect(body.text).toBe(direct.text);
    expect(body.token_ids).toEqual(direct.tokenIds);
    expect(body.usage.input_tokens).toBe(direct.done.usage.inputTokens);
  });

  it('streams token events then done, whose texts add up to the JSON text', async () => {
    const full = await json(await post(greedy));
    const res = await post({ ...greedy, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(res.headers.get('cache-control')).toBe('no-cache, no-transform');
    const events = await readSse(res);
    const tokens = events.filter((e) => e.type === 'token');
    expect(tokens).toHaveLength(30);
    expect(tokens.map((e) => e.index)).toEqual(Array.from({ length: 30 }, (_, i) => i));
    expect(tokens.map((e) => e.id)).toEqual(full.token_ids);
    const done = events.at(-1);
    expect(done).toEqual({ type: 'done', finish_reason: 'length', usage: full.usage });
    expect(tokens.map((e) => e.token).join('')).toBe(full.text);
  });

  it('ends at a stop string and reports it', async () => {
    const full = (await json(await post(greedy))).text as string;
    const stop = full.slice(12, 16);
    const body = await json(await post({ ...greedy, stop }));
    expect(body).toMatchObject({ finish_reason: 'stop', stop, text: full.slice(0, full.indexOf(stop)) });
  });

  it('returns logprobs in stream events when asked', async () => {
    const events = await readSse(await post({ ...greedy, max_tokens: 3, stream: true, logprobs: 2 }));
    const first = events[0] as { logprob: number; top_logprobs: { id: number; logprob: number }[] };
    expect(first.logprob).toBeLessThanOrEqual(0);
    expect(first.top_logprobs).toHaveLength(2);
  });

  it('accepts token ids as the prompt', async () => {
    const body = await json(await post({ prompt: [1, 80, 147, 201], max_tokens: 5, temperature: 0 }));
    expect(body.usage.input_tokens).toBe(4);
  });

  it('rejects bad input with a 4xx that says what to change, and stays healthy', async () => {
    const cases: [unknown, number, string, RegExp][] = [
      ['{"prompt": "x",', 400, 'STRATA_INVALID_JSON', /JSON/i],
      [{ prompt: 42 }, 400, 'STRATA_INVALID_REQUEST', /prompt/],
      [{ prompt: 'x', max_tokens: -1 }, 400, 'STRATA_INVALID_REQUEST', /max_tokens/],
      [{ prompt: 'x', top_p: 1.5 }, 400, 'STRATA_INVALID_REQUEST', /top_p/],
      [{ prompt: 'x', stop: [''] }, 400, 'STRATA_INVALID_REQUEST', /stop/],
      [{ prompt: 'x', temprature: 0.5 }, 400, 'STRATA_INVALID_REQUEST', /temprature/],
      [{ prompt: '' }, 400, 'STRATA_INVALID_REQUEST', /prompt/],
      [{ prompt: 'x', model: 'gpt-9' }, 404, 'STRATA_MODEL_NOT_FOUND', /gpt-9.*tinystories-656k/],
      [{ prompt: 'once '.repeat(600) }, 400, 'STRATA_PROMPT_TOO_LONG', /512/],
      [{ prompt: [1, 99999] }, 400, 'STRATA_INVALID_PARAM', /vocab/],
      [{ prompt: 'x', priority: 1000 }, 400, 'STRATA_INVALID_REQUEST', /priority/],
    ];
    for (const [body, status, code, message] of cases) {
      const res = await post(body);
      const error = (await json(res)).error;
      expect([JSON.stringify(body).slice(0, 40), res.status, error.code]).toEqual([
        JSON.stringify(body).slice(0, 40),
        status,
        code,
      ]);
      expect(error.message).toMatch(message);
    }
    expect((await post({ prompt: 'x', max_tokens: 2 })).status).toBe(200);
  });

  it('frees the sequences of clients that disconnect mid-stream', async () => {
    // Thirty long generations share the engine, so each stream advances at a fraction of the
    // engine's speed and needs hundreds of ms to finish: the clients, which leave as soon as
    // their response headers arrive, are gone long before that on any machine.
    const slow = await startBackend({ STRATA_WARMUP: 'false' });
    try {
      const runtime = slow.host.get();
      const busy = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          runtime.start({ prompt: `Busy ${i}`, params: { maxTokens: 490, ignoreEos: true, temperature: 0 } }),
        ),
      );
      const before = runtime.engine.stats().finishedAbort;
      await Promise.all(
        [0, 1].map(async (i) => {
          const controller = new AbortController();
          const res = await fetch(`${slow.url}/v1/generate`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              ...greedy,
              prompt: `${greedy.prompt} ${i}`,
              max_tokens: 490,
              stream: true,
            }),
            signal: controller.signal,
          });
          expect(res.status).toBe(200);
          controller.abort();
        }),
      );
      for (let i = 0; i < 100 && runtime.engine.stats().finishedAbort < before + 2; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(runtime.engine.stats().finishedAbort).toBe(before + 2);
      for (const b of busy) await b.return?.();
      for (let i = 0; i < 100 && (runtime.liveRequests > 0 || runtime.engine.stats().kvBlocksUsed > 0); i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(runtime.liveRequests).toBe(0);
      expect(runtime.engine.stats()).toMatchObject({ kvBlocksUsed: 0, numRunning: 0 });
    } finally {
      await slow.close();
    }
  });

  it('carries the signed tenant into the prefix cache namespace', async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => 10 + i);
    const stats = () => backend.host.get().engine.stats().prefixCacheHits;
    const as = (tenant: string) => identityHeaders(identityKey, { tenant });
    await post({ prompt, max_tokens: 1 }, as('acme'));
    const before = stats();
    await post({ prompt, max_tokens: 1 }, as('globex'));
    expect(stats()).toBe(before);
    await post({ prompt, max_tokens: 1 }, as('acme'));
    expect(stats()).toBe(before + 32);
  });
});

describe.skipIf(!tiny.path)(`admission and deadlines${tiny.skipped}`, () => {
  it('answers 429 with Retry-After when running + queued is full, and admits again once a slot frees', async () => {
    const small = await startBackend({
      STRATA_WARMUP: 'false',
      STRATA_MAX_NUM_SEQS: '2',
      STRATA_MAX_QUEUED: '1',
    });
    try {
      // A started request holds its admission slot until its stream is read to the end or
      // closed; three of them fill running (2) + queued (1) whatever the engine's speed.
      const runtime = small.host.get();
      const held = await Promise.all(
        [0, 1, 2].map(() => runtime.start({ prompt: 'Once upon a time', params: { maxTokens: 4 } })),
      );
      const req = () =>
        fetch(`${small.url}/v1/generate`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ ...greedy, max_tokens: 8 }),
        });
      const rejected = await Promise.all(Array.from({ length: 4 }, req));
      for (const r of rejected) {
        expect(r.status).toBe(429);
        expect(r.headers.get('retry-after')).toBe('1');
        expect((await json(r)).error).toMatchObject({
          code: 'STRATA_QUEUE_FULL',
          message: 'the backend holds 3 requests (running + queued); retry later',
        });
      }
      await held[0]?.return?.();
      expect((await req()).status).toBe(200);
      for (const h of held.slice(1)) await h.return?.();
      expect(runtime.liveRequests).toBe(0);
    } finally {
      await small.close();
    }
  });

  it('ends a request at its deadline with finish_reason timeout and what was generated', async () => {
    const strict = await startBackend({
      STRATA_WARMUP: 'false',
      STRATA_REQUEST_TIMEOUT_MS: '5',
      STRATA_MAX_NUM_SEQS: '4',
    });
    try {
      const events = await readSse(
        await fetch(`${strict.url}/v1/generate`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ ...greedy, max_tokens: 500, stream: true }),
        }),
      );
      const done = events.at(-1) as { type: string; finish_reason: string; usage: { output_tokens: number } };
      expect(done.type).toBe('done');
      expect(done.finish_reason).toBe('timeout');
      expect(done.usage.output_tokens).toBe(events.length - 1);
      expect(done.usage.output_tokens).toBeLessThan(500);
    } finally {
      await strict.close();
    }
  });
});
