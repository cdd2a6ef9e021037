// The router's routes through app.inject (no listening router): the app as the service builds
// it, a routing file, and fake backends on port 0 that record what reaches them.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeBackend } from './support/fake-backend.js';
import { buildTestRouter, type TestRouter } from './support/router.js';

let dir: string;
const backends: Record<string, FakeBackend> = {};

function startRouter(env: Record<string, string> = {}): Promise<TestRouter> {
  const b = (name: string) => `{ name: ${name}, url: "${backends[name]?.url}" }`;
  const routes = join(dir, 'routes.yaml');
  writeFileSync(
    routes,
    `pools:
  a: { backends: [${b('a')}] }
  b: { backends: [${b('b')}] }
  both: { backends: [${b('a')}, ${b('b')}] }
  flaky-first: { backends: [${b('flaky')}, ${b('busy')}] }
  unready: { backends: [${b('unready')}] }
rules:
  - { name: model-b, match: { model: b }, pool: b }
  - { name: retry, match: { headers: { x-pool: flaky-first } }, pool: flaky-first,
      policy: { weights: { queue: 1, kv: 0, prefix: 0, session: 0 } } }
  - { name: nothing-ready, match: { headers: { x-pool: unready } }, pool: unready }
  - { name: sessions, match: { headers: { x-pool: both } }, pool: both }
default: { pool: a }
`,
  );
  return buildTestRouter({ STRATA_ROUTES_FILE: routes, ...env }, ['a', 'b', 'flaky', 'busy']);
}

let router: TestRouter;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'strata-router-routes-'));
  for (const name of ['a', 'b', 'flaky', 'busy', 'unready']) {
    const backend = await FakeBackend.start();
    backend.answer = { status: 200, json: { served_by: name } };
    backends[name] = backend;
  }
  (backends.flaky as FakeBackend).answer = { status: 500 };
  (backends.busy as FakeBackend).load.running = 5; // the queue scorer puts flaky first
  (backends.unready as FakeBackend).readyStatus = 503;
  router = await startRouter();
});

afterAll(async () => {
  await router?.close();
  await Promise.all(Object.values(backends).map((b) => b.close()));
  rmSync(dir, { recursive: true, force: true });
});

const decision = (r: TestRouter, requestId: string) =>
  r.lines.find((l) => l.msg === 'route decision' && l.request_id === requestId);

/** POST /v1/generate with a JSON body and these headers, through app.inject. */
const generate = (headers: Record<string, string>, payload = '{"prompt":"hi"}') =>
  router.app.inject({
    method: 'POST',
    url: '/v1/generate',
    headers: { 'content-type': 'application/json', ...headers },
    payload,
  });

describe('router routes', () => {
  it('forwards the body byte for byte, and matches rules on its parsed value', async () => {
    // JSON.parse keeps the last of duplicated keys; re-serializing would drop the first, the
    // whitespace, the escape and the 1.0.
    const body = '{"model":"a",  "prompt" : "caf\\u00e9",\n\t"max_tokens": 1.0, "model":"b"}';
    const res = await router.app.inject({
      method: 'POST',
      url: '/v1/generate',
      headers: { 'content-type': 'application/json; charset=utf-8' },
      payload: body,
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ served_by: 'b' });
    expect([res.headers['x-strata-route'], res.headers['x-strata-backend']]).toEqual(['model-b', 'b']);
    const received = backends.b?.received.at(-1);
    expect(received?.body.equals(Buffer.from(body))).toBe(true);
    expect(received).toMatchObject({ method: 'POST', path: '/v1/generate', contentType: 'application/json' });
  });

  it('forwards a text/plain body as sent', async () => {
    const res = await router.app.inject({
      method: 'POST',
      url: '/v1/completions',
      headers: { 'content-type': 'text/plain' },
      payload: ' not {json} ',
    });
    expect(res.statusCode).toBe(200);
    expect(backends.a?.received.at(-1)?.body.toString()).toBe(' not {json} ');
  });

  it('refuses an empty or poisoned JSON body as Fastify does, without forwarding it', async () => {
    const before = backends.a?.received.length;
    for (const payload of ['', '{"__proto__":{"polluted":true}}', '{"constructor":{"prototype":{}}}']) {
      const res = await router.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { 'content-type': 'application/json' },
        payload,
      });
      expect(res.statusCode, payload).toBe(400);
      expect(res.json().error.code, payload).toBe('STRATA_INVALID_JSON');
    }
    expect(backends.a?.received.length).toBe(before);
  });

  it('forwards GET /v1/models without a body', async () => {
    const res = await router.app.inject({ method: 'GET', url: '/v1/models' });
    expect(res.statusCode).toBe(200);
    expect(backends.a?.received.at(-1)).toMatchObject({ method: 'GET', path: '/v1/models' });
    expect(backends.a?.received.at(-1)?.body.length).toBe(0);
  });

  it('moves on to the next candidate after a 5xx, and logs and counts the decision', async () => {
    const res = await generate({ 'x-pool': 'flaky-first', 'x-request-id': 'retry-1' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-strata-backend']).toBe('busy');
    expect(decision(router, 'retry-1')).toMatchObject({
      rule: 'retry',
      pool: 'flaky-first',
      session: null,
      affinity: null,
      candidates: [
        { backend: 'flaky', score: 1, scores: { queue: 1, kv: 1, prefix: 0, session: 0 } },
        { backend: 'busy', score: 0, scores: { queue: 0, kv: 1, prefix: 0, session: 0 } },
      ],
      excluded: [],
      choice: 'busy',
      reason: 'flaky score 1.000 (queue 1.000 kv 1.000 prefix 0.000 session 0.000)',
      attempts: [
        { backend: 'flaky', outcome: 'upstream_5xx', status: 500 },
        { backend: 'busy', outcome: 'ok', status: 200 },
      ],
      failed_after_first_byte: false,
    });
    const metrics = (await router.app.inject('/metrics')).body;
    expect(metrics).toMatch(/strata_router_retries_total\{backend="flaky",outcome="upstream_5xx"[^}]*\} 1\n/);
    expect(metrics).toMatch(/strata_router_decisions_total\{rule="retry",backend="busy"[^}]*\} 1\n/);
    expect(metrics).toMatch(
      /strata_router_upstream_first_byte_seconds_count\{[^}]*backend="busy"[^}]*\} 1\n/,
    );
  });

  it('answers 503 when no backend of the pool is eligible, and logs why', async () => {
    const res = await generate({ 'x-pool': 'unready', 'x-request-id': 'none-1' });
    expect(res.statusCode).toBe(503);
    expect(res.json().error.code).toBe('STRATA_NO_BACKEND');
    expect(decision(router, 'none-1')).toMatchObject({
      rule: 'nothing-ready',
      candidates: [],
      excluded: [{ name: 'unready', why: 'not ready' }],
      choice: null,
      reason: 'no eligible backend: unready (not ready)',
      attempts: [],
      error: 'no backend is ready for this request',
    });
    expect((await router.app.inject('/metrics')).body).toMatch(
      /strata_router_decisions_total\{rule="nothing-ready",backend="none"[^}]*\} 1\n/,
    );
  });

  it('keeps a session on the backend that first served it', async () => {
    const seen: unknown[] = [];
    for (let i = 0; i < 6; i++) {
      const headers = { 'x-pool': 'both', 'x-session-id': 'story-1', 'x-request-id': `session-${i}` };
      const res = await generate(headers, `{"prompt":"turn ${i}"}`);
      seen.push(res.headers['x-strata-backend']);
    }
    expect(new Set(seen).size).toBe(1);
    expect(decision(router, 'session-0')?.affinity).toBe('miss');
    expect(decision(router, 'session-5')?.affinity).toBe('hit');
  });
});

describe('router load freshness (STRATA_LOAD_MAX_AGE_MS)', () => {
  it('scores load older than the limit as unknown', async () => {
    const env = (maxAgeMs: number) => ({
      STRATA_LOAD_MAX_AGE_MS: String(maxAgeMs),
      STRATA_LOAD_POLL_INTERVAL_MS: '60000', // only refresh() polls
    });
    const [strict, loose] = await Promise.all([startRouter(env(1)), startRouter(env(60_000))]);
    try {
      await Promise.all([strict.parts.deps.tracker.refresh(), loose.parts.deps.tracker.refresh()]);
      await sleep(5);
      await strict.app.inject({ url: '/v1/models', headers: { 'x-request-id': 'stale-1' } });
      await loose.app.inject({ url: '/v1/models', headers: { 'x-request-id': 'fresh-1' } });
    } finally {
      await Promise.all([strict.close(), loose.close()]);
    }
    const scores = (r: TestRouter, id: string) =>
      (decision(r, id)?.candidates as Array<{ scores: Record<string, number> }> | undefined)?.[0]?.scores;
    expect(scores(strict, 'stale-1')).toMatchObject({ queue: 0.5, kv: 0.5 });
    expect(scores(loose, 'fresh-1')).toMatchObject({ queue: 1, kv: 1 });
  });
});
