// What the edge does with the router's answers: passes them on as they are (no retries), maps a
// router that cannot be reached to the catalogue, ends a stream that breaks with an error event,
// cancels the upstream when the client leaves, and charges the tokens the answer reports.
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, writeFileSync } from 'node:fs';
import type http from 'node:http';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEdge, type TestEdge } from './support/edge.js';
import { jsonAnswer, RecordingUpstream } from './support/upstream.js';

const KEY = 'sk-forwarding';
const sha = (key: string) => `sha256:${createHash('sha256').update(key).digest('hex')}`;
const headers = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };

let upstream: RecordingUpstream;
let edge: TestEdge;
let tenantsFile: string;

function writeTenants(extra = ''): void {
  writeFileSync(
    tenantsFile,
    `tenants:\n  - name: acme\n    keys: ["${sha(KEY)}"]\n    requests_per_minute: 1000\n    tokens_per_minute: 100000\n${extra}`,
  );
}

beforeAll(async () => {
  upstream = await RecordingUpstream.start();
  tenantsFile = join(mkdtempSync(join(tmpdir(), 'edge-')), 'tenants.yaml');
  writeTenants();
  edge = await startEdge({ STRATA_ROUTER_URL: upstream.url, STRATA_EDGE_TENANTS_FILE: tenantsFile });
});
afterAll(async () => {
  await edge?.close();
  await upstream?.close();
});
afterEach(() => {
  upstream.received.length = 0;
  upstream.answer = jsonAnswer(200, { text: 'ok', usage: { input_tokens: 1, output_tokens: 1 } });
});

const post = (path: string, body: unknown, extra: Record<string, string> = {}) =>
  fetch(`${edge.url}${path}`, {
    method: 'POST',
    headers: { ...headers, ...extra },
    body: JSON.stringify(body),
  });

function sse(events: string[], opts: { breakAfter?: number; holdOpen?: boolean } = {}) {
  return (_req: unknown, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'x-strata-backend': 'b1' });
    events.forEach((e, i) => {
      if (opts.breakAfter === undefined || i < opts.breakAfter) res.write(`data: ${e}\n\n`);
    });
    // The break comes after the events went out, as a backend dying mid-stream would.
    if (opts.breakAfter !== undefined) setTimeout(() => res.socket?.destroy(), 50);
    else if (!opts.holdOpen) res.end();
  };
}

describe('forwarding', () => {
  it("accepts OpenAI clients' null fields as absent and forwards the body without them", async () => {
    const completions = { model: 'm', prompt: 'x', max_tokens: 4, stop: null, seed: null, stream: null };
    const res = await post('/v1/completions', completions);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const chat = {
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: null,
      tools: null,
      logprobs: null,
    };
    const chatRes = await post('/v1/chat/completions', chat);
    expect(chatRes.status).toBe(200);
    await chatRes.arrayBuffer();
    const [sentCompletions, sentChat] = upstream.received.map((r) => JSON.parse(r.body));
    expect(sentCompletions).toMatchObject({ model: 'm', prompt: 'x', max_tokens: 4, stream: false });
    expect(Object.keys(sentCompletions)).not.toContain('stop');
    expect(Object.keys(sentCompletions)).not.toContain('seed');
    expect(sentChat).toMatchObject({ messages: [{ role: 'user', content: 'hi' }], logprobs: false });
    expect(Object.keys(sentChat)).not.toContain('max_tokens');
    expect(Object.keys(sentChat)).not.toContain('tools');
  });

  it("leaves out a max_tokens the client did not send, so the backend's STRATA_DEFAULT_MAX_TOKENS applies", async () => {
    const res = await post('/v1/completions', { model: 'm', prompt: 'x', max_tokens: null });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const sent = JSON.parse(upstream.received.at(-1)?.body ?? '{}');
    expect(sent).toMatchObject({ model: 'm', prompt: 'x' });
    expect(Object.keys(sent)).not.toContain('max_tokens');
  });

  it('passes error answers through once, without retrying', async () => {
    const error = {
      error: { code: 'STRATA_NO_BACKEND', message: 'no backend is ready', type: 'overloaded' },
    };
    upstream.answer = (_req, res) => {
      res.writeHead(503, {
        'content-type': 'application/json',
        'retry-after': '2',
        'x-strata-route': 'default',
      });
      res.end(JSON.stringify(error));
    };
    const res = await post('/v1/generate', { prompt: 'x' });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('2');
    expect(res.headers.get('x-strata-route')).toBe('default');
    expect(await res.json()).toEqual(error);
    expect(upstream.received).toHaveLength(1);
    expect(
      await edge.metric('strata_edge_requests_total', { outcome: 'upstream_error' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('answers 502 when the router cannot be reached, naming no address', async () => {
    const dead = await RecordingUpstream.start();
    const url = dead.url;
    await dead.close();
    const lonely = await startEdge({ STRATA_ROUTER_URL: url });
    try {
      const res = await fetch(`${lonely.url}/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"prompt":"x"}',
      });
      expect(res.status).toBe(502);
      expect(await res.json()).toEqual({
        error: {
          code: 'STRATA_UPSTREAM_ERROR',
          message: 'The router could not be reached.',
          type: 'internal',
        },
      });
    } finally {
      await lonely.close();
    }
  });

  it('ends a /v1/generate stream that breaks upstream with an error event', async () => {
    const token = JSON.stringify({ type: 'token', token: 'a', id: 1, index: 0 });
    upstream.answer = sse([token, token, token], { breakAfter: 2 });
    const res = await post('/v1/generate', { prompt: 'x', stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-strata-backend')).toBe('b1');
    const text = await res.text();
    expect(text).toBe(
      `data: ${token}\n\ndata: ${token}\n\n` +
        'data: {"type":"error","error":{"code":"STRATA_UPSTREAM_ERROR","message":"The response broke off upstream.","type":"internal"}}\n\n',
    );
  });

  it('ends an OpenAI stream that breaks upstream with an error chunk and [DONE]', async () => {
    const chunk = JSON.stringify({ id: 'c', object: 'text_completion', choices: [{ index: 0, text: 'a' }] });
    upstream.answer = sse([chunk, chunk], { breakAfter: 1 });
    const res = await post('/v1/completions', { prompt: 'x', stream: true });
    expect(await res.text()).toBe(
      `data: ${chunk}\n\n` +
        'data: {"error":{"code":"STRATA_UPSTREAM_ERROR","message":"The response broke off upstream.","type":"internal"}}\n\ndata: [DONE]\n\n',
    );
  });

  it('cancels the upstream request when the client leaves mid-stream', async () => {
    let upstreamClosed: Promise<unknown> = Promise.resolve();
    upstream.answer = (_req, res) => {
      upstreamClosed = once(res, 'close');
      sse([JSON.stringify({ type: 'token', token: 'a', id: 1, index: 0 })], { holdOpen: true })(_req, res);
    };
    const res = await post('/v1/generate', { prompt: 'x', stream: true });
    const reader = res.body?.getReader();
    await reader?.read(); // the first token arrived
    await reader?.cancel();
    await upstreamClosed; // resolves only when the edge closed its upstream request
    expect(
      await edge.metric('strata_edge_requests_total', { outcome: 'client_closed' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('reads from the router only as fast as the client reads (backpressure)', async () => {
    // 128 MiB of SSE comments (no tokens to charge), written as fast as the edge takes them.
    const total = 128 * 1024 * 1024;
    const chunk = Buffer.from(`: ${'x'.repeat(64 * 1024 - 4)}\n\n`); // 64 KiB
    let written = 0;
    upstream.answer = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      const pump = () => {
        while (written < total) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
    };
    const answer = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = request(`${edge.url}/v1/generate`, { method: 'POST', headers }, resolve);
      req.on('error', reject);
      req.end(JSON.stringify({ prompt: 'x', stream: true }));
    });
    answer.pause(); // a client that reads nothing for now
    // Until the router's writes stall (the buffers between are full) or everything went.
    let last = -1;
    for (let i = 0; i < 200 && written < total && written !== last; i++) {
      last = written;
      await new Promise((r) => setTimeout(r, 300));
    }
    const whileStalled = written;
    let received = 0;
    answer.on('data', (c: Buffer) => {
      received += c.length;
    });
    answer.resume();
    await once(answer, 'end');
    // Socket buffers hold a few MiB per hop; without backpressure the edge would take it all.
    expect(whileStalled).toBeLessThan(total / 2);
    expect(received).toBe(total);
  });

  it('asks for the OpenAI usage chunk, charges it, and hides it from a client that did not ask', async () => {
    const chunk = JSON.stringify({
      id: 'c',
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta: { content: 'a' } }],
    });
    const usage = JSON.stringify({
      id: 'c',
      object: 'chat.completion.chunk',
      choices: [],
      usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 },
    });
    upstream.answer = sse([chunk, chunk, usage, '[DONE]']);
    const before = await edge.metric('strata_edge_tokens_charged_total', { tenant: 'acme' });
    const res = await post('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    expect(await res.text()).toBe(`data: ${chunk}\n\ndata: ${chunk}\n\ndata: [DONE]\n\n`);
    expect(JSON.parse(upstream.received[0]?.body ?? '').stream_options).toEqual({ include_usage: true });
    await expect
      .poll(() => edge.metric('strata_edge_tokens_charged_total', { tenant: 'acme' }))
      .toBe(before + 9);

    upstream.received.length = 0;
    const asked = await post('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(await asked.text()).toBe(`data: ${chunk}\n\ndata: ${chunk}\n\ndata: ${usage}\n\ndata: [DONE]\n\n`);
  });
});

describe('quotas on the way through', () => {
  it('refuses the request after the tenant limit with 429, Retry-After and rate-limit headers', async () => {
    writeTenants(
      `  - name: small\n    keys: ["${sha('sk-small')}"]\n    requests_per_minute: 2\n    tokens_per_minute: 0\n`,
    );
    await expect
      .poll(
        async () =>
          (await fetch(`${edge.url}/v1/models`, { headers: { authorization: 'Bearer sk-small' } })).status,
      )
      .toBe(200); // the watcher picked the new tenant up (this took one request)
    const second = await fetch(`${edge.url}/v1/models`, { headers: { authorization: 'Bearer sk-small' } });
    expect(second.status).toBe(200);
    expect(second.headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect(second.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const third = await fetch(`${edge.url}/v1/models`, { headers: { authorization: 'Bearer sk-small' } });
    expect(third.status).toBe(429);
    const retryAfter = Number(third.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(25);
    expect(retryAfter).toBeLessThanOrEqual(30);
    expect(third.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(await third.json()).toEqual({
      error: {
        code: 'STRATA_RATE_LIMITED',
        message: `Tenant "small" sent its 2 requests per minute; retry in ${retryAfter} s.`,
        type: 'rate_limit',
      },
    });
    expect(await edge.metric('strata_edge_quota_used_ratio', { tenant: 'small', quota: 'requests' })).toBe(1);
  });

  it('charges the usage of a JSON answer and refuses once the token quota is in debt', async () => {
    writeTenants(`  - name: tokens\n    keys: ["${sha('sk-tokens')}"]\n    tokens_per_minute: 100\n`);
    const auth = { authorization: 'Bearer sk-tokens' };
    await expect.poll(async () => (await fetch(`${edge.url}/v1/models`, { headers: auth })).status).toBe(200);
    upstream.answer = jsonAnswer(200, { text: 'long', usage: { input_tokens: 20, output_tokens: 400 } });
    const before = await edge.metric('strata_edge_tokens_charged_total', { tenant: 'tokens' });
    const first = await post('/v1/generate', { prompt: 'x' }, auth);
    expect(first.status).toBe(200);
    await first.arrayBuffer();
    await expect
      .poll(() => edge.metric('strata_edge_tokens_charged_total', { tenant: 'tokens' }))
      .toBe(before + 420);
    const refused = await post('/v1/generate', { prompt: 'x' }, auth);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('STRATA_QUOTA_EXCEEDED');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(100); // ~3 min to repay 320 at 100/min
  });
});
