// The router end to end: real backend processes (CPU engine, tinystories-656k), a real routing
// file, real Redis, the router as the service builds it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { identityHeaders, optionalTestModel, SpawnedRedis, testIdentityKey } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BackendProcess, startBackendProcess, waitReady } from './support/backend-process.js';
import { buildTestRouter, type TestRouter } from './support/router.js';

const tiny = optionalTestModel('tinystories-656k');
// The router verifies the edge's signature; the tests sign as the edge would.
const identityKey = testIdentityKey();
const acme = (requestId?: string) =>
  identityHeaders(identityKey, { tenant: 'acme', ...(requestId ? { requestId } : {}) });

interface Router extends TestRouter {
  url: string;
}

async function startRouter(
  env: Record<string, string>,
  expectReady: string[] = ['b1', 'b2'],
): Promise<Router> {
  const router = await buildTestRouter(
    { STRATA_HEALTH_PROBE_INTERVAL_MS: '100', STRATA_LOAD_POLL_INTERVAL_MS: '50', ...env },
    expectReady,
  );
  await router.app.listen({ host: '127.0.0.1', port: 0 });
  return { ...router, url: `http://127.0.0.1:${(router.app.server.address() as AddressInfo).port}` };
}

const backends: Record<string, BackendProcess> = {};
// Made in beforeAll, so a run that skips every test (no model) leaves no temp dir behind.
let dir: string;
let routesFile: string;

function routes(tenantPool: string): string {
  const b = (name: string) => `{ name: ${name}, url: "${backends[name]?.url}" }`;
  return `pools:
  one: { backends: [${b('b1')}] }
  two: { backends: [${b('b2')}] }
  both: { backends: [${b('b1')}, ${b('b2')}] }
  with-unready: { backends: [${b('unready')}, ${b('b2')}] }
rules:
  - { name: tenant-acme, match: { tenant: acme }, pool: ${tenantPool} }
  - { name: canary, match: { headers: { x-canary: "1" } }, pool: one }
  - { name: unready-pool, match: { headers: { x-pool: unready } }, pool: with-unready }
default: { pool: both }
`;
}

let router: Router;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'strata-router-e2e-'));
  routesFile = join(dir, 'routes.yaml');
  const results = await Promise.allSettled([
    startBackendProcess('b1'),
    startBackendProcess('b2'),
    // No model: live, never ready.
    startBackendProcess('unready', { STRATA_MODEL_DIR: '' }),
  ]);
  const started = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  for (const b of started) backends[b.name] = b; // afterAll stops whatever did start
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
  await Promise.all([waitReady(started[0]?.url ?? ''), waitReady(started[1]?.url ?? '')]);
  writeFileSync(routesFile, routes('two'));
  router = await startRouter({ STRATA_ROUTES_FILE: routesFile, STRATA_IDENTITY_KEYS: identityKey.env });
}, 90_000);

afterAll(async () => {
  await router?.close();
  await Promise.all(Object.values(backends).map((b) => b.stop('SIGKILL')));
  rmSync(dir, { recursive: true, force: true });
});

const generate = (base: string, headers: Record<string, string> = {}, body: Record<string, unknown> = {}) =>
  fetch(`${base}/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4, ...body }),
  });

describe.skipIf(!tiny.path)(`router${tiny.skipped}`, () => {
  it('routes by tenant and header as the rules say, and logs each decision', async () => {
    const signed = await generate(router.url, acme('req-acme'));
    expect(signed.status).toBe(200);
    expect([signed.headers.get('x-strata-backend'), signed.headers.get('x-strata-route')]).toEqual([
      'b2',
      'tenant-acme',
    ]);
    expect(((await signed.json()) as { usage: { output_tokens: number } }).usage.output_tokens).toBe(4);
    // Claiming the tenant without the edge's signature routes as tenant "unverified".
    const claimed = await generate(router.url, { 'x-strata-tenant': 'acme' });
    expect(claimed.headers.get('x-strata-route')).toBe('default');
    await claimed.text();
    const canary = await generate(router.url, { 'x-canary': '1' });
    expect([canary.headers.get('x-strata-backend'), canary.headers.get('x-strata-route')]).toEqual([
      'b1',
      'canary',
    ]);
    await canary.text();
    const decision = router.lines.find((l) => l.msg === 'route decision' && l.request_id === 'req-acme');
    expect(decision).toMatchObject({
      rule: 'tenant-acme',
      pool: 'two',
      choice: 'b2',
      attempts: [{ backend: 'b2', outcome: 'ok' }],
    });
    expect(decision?.candidates).toHaveLength(1);
  });

  it('never sends traffic to a backend that is not ready', async () => {
    for (let i = 0; i < 5; i++) {
      const res = await generate(router.url, { 'x-pool': 'unready' });
      expect(res.headers.get('x-strata-backend')).toBe('b2');
      await res.text();
    }
  });

  it('keeps a session on its backend', async () => {
    const seen = new Set<string | null>();
    for (let i = 0; i < 6; i++) {
      const res = await generate(router.url, { 'x-session-id': 'story-7' }, { prompt: `turn ${i}` });
      seen.add(res.headers.get('x-strata-backend'));
      await res.text();
    }
    expect(seen.size).toBe(1);
  });

  it('sends requests that share a long prefix to the same backend', async () => {
    const prefix =
      'Once upon a time there was a little dog who loved to run in the park every morning. '.repeat(8);
    const seen = new Set<string | null>();
    for (let i = 0; i < 6; i++) {
      const res = await generate(router.url, {}, { prompt: `${prefix} Day ${i}:` });
      seen.add(res.headers.get('x-strata-backend'));
      await res.text();
    }
    expect(seen.size).toBe(1);
  });

  it('keeps the last good rules when a reload is invalid, and applies a valid one', async () => {
    writeFileSync(routesFile, 'pools: [not, a, mapping');
    await new Promise((r) => setTimeout(r, 300));
    const still = await generate(router.url, acme());
    expect(still.headers.get('x-strata-backend')).toBe('b2');
    await still.text();
    expect(router.lines.some((l) => l.msg === 'routing file rejected: keeping the last good one')).toBe(true);
    writeFileSync(routesFile, routes('one'));
    let backend: string | null = null;
    for (let i = 0; i < 20 && backend !== 'b1'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const res = await generate(router.url, acme());
      backend = res.headers.get('x-strata-backend');
      await res.text();
    }
    expect(backend).toBe('b1');
  });
});

describe.skipIf(!tiny.path)(`router with two replicas sharing Redis${tiny.skipped}`, () => {
  it('keeps sessions across replicas, and keeps routing when Redis stops', async () => {
    const redis = await SpawnedRedis.start();
    const env = { STRATA_ROUTES_FILE: routesFile, REDIS_URL: redis.url };
    const [r1, r2] = await Promise.all([startRouter(env), startRouter(env)]);
    try {
      const first = await generate(r1.url, { 'x-session-id': 'shared-1' });
      const backend = first.headers.get('x-strata-backend');
      await first.text();
      for (const r of [r2, r1, r2]) {
        const res = await generate(r.url, { 'x-session-id': 'shared-1' }, { prompt: 'and then' });
        expect(res.headers.get('x-strata-backend')).toBe(backend);
        await res.text();
      }
      await redis.stop();
      for (const r of [r1, r2]) {
        const res = await generate(r.url, { 'x-session-id': 'shared-1' });
        expect(res.status).toBe(200);
        await res.text();
      }
      const metrics = await (await fetch(`${r1.url}/metrics`)).text();
      expect(metrics).toMatch(
        /strata_router_affinity_total\{result="unavailable",service="router-service"\} [1-9]/,
      );
    } finally {
      await Promise.all([r1.close(), r2.close()]);
      await redis.stop();
    }
  });
});

describe.skipIf(!tiny.path)(`router when a backend dies${tiny.skipped}`, () => {
  it('serves from the next candidate when the first dies before its first byte, and sends a clean error after it', async () => {
    const b3 = await startBackendProcess('b3', { STRATA_ENGINE_THREADS: '1' });
    const b4 = await startBackendProcess('b4');
    await Promise.all([waitReady(b3.url), waitReady(b4.url)]);
    const file = join(dir, 'dying.yaml');
    writeFileSync(
      file,
      `pools:\n  pair: { backends: [{ name: b3, url: "${b3.url}" }, { name: b4, url: "${b4.url}" }] }\ndefault: { pool: pair }\n`,
    );
    const r = await startRouter({ STRATA_ROUTES_FILE: file, STRATA_HEALTH_PROBE_INTERVAL_MS: '60000' }, [
      'b3',
      'b4',
    ]);
    try {
      // A session pins b3 first in the candidate list.
      let pinned = false;
      for (let i = 0; i < 10 && !pinned; i++) {
        const res = await generate(r.url, { 'x-session-id': `s${i}` });
        pinned = res.headers.get('x-strata-backend') === 'b3';
        await res.text();
        if (pinned) {
          // After the first byte: b3 dies mid-stream; the client gets an error event, not a hang.
          const stream = await generate(
            r.url,
            { 'x-session-id': `s${i}` },
            { max_tokens: 490, stream: true, ignore_eos: true },
          );
          expect(stream.headers.get('x-strata-backend')).toBe('b3');
          const reader = stream.body?.getReader();
          await reader?.read();
          await b3.stop('SIGKILL');
          let text = '';
          const decoder = new TextDecoder();
          for (;;) {
            const chunk = await reader?.read();
            if (!chunk || chunk.done) break;
            text += decoder.decode(chunk.value);
          }
          expect(text).toMatch(/data: \{"type":"error","error":\{"code":"STRATA_UPSTREAM_ERROR"/);
          // Before the first byte: b3 is gone, the same session's next request lands on b4.
          const next = await generate(r.url, { 'x-session-id': `s${i}` });
          expect(next.status).toBe(200);
          expect(next.headers.get('x-strata-backend')).toBe('b4');
          await next.text();
        }
      }
      expect(pinned).toBe(true);
    } finally {
      await r.close();
      await Promise.all([b3.stop('SIGKILL'), b4.stop('SIGKILL')]);
    }
  });
});
