// The backend takes tenant (its prefix-cache namespace) and priority from the edge's signed
// identity only (docs/inference-backend.md, Identity). A real backend (port 0, real engine,
// tinystories-656k) in both modes: a caller without a valid identity is served as tenant
// "unverified" at priority 100 whatever it claims, so it can neither read another tenant's
// cached prefixes by timing nor jump the queue (the engine orders its queue by that priority:
// engine tests; under load through the edge: edge-gateway test/priority.e2e.test.ts); or it is
// refused with 401.
import { identityHeaders, testIdentityKey } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readSse, startBackend, type TestBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';
import { type ObservedBackend, startObservedBackend } from './support/observed-backend.js';

const tiny = optionalModel('tinystories-656k');
const key = testIdentityKey('k1');
const forger = testIdentityKey('k1'); // the right key id, another secret

const post = (url: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) =>
  fetch(`${url}/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });

async function metric(url: string, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = new RegExp(`^${name}\\{${labels}[^}]*\\} (\\S+)$`, 'm').exec(text);
  return Number(m?.[1] ?? 0);
}

// Token ids, so the block arithmetic is exact: 40 tokens fill two 16-token blocks.
const PROMPT = Array.from({ length: 40 }, (_, i) => 100 + i);
const BLOCK_HITS = 32;

describe.skipIf(!tiny.path)(`mode anonymous${tiny.skipped}`, () => {
  let backend: ObservedBackend;
  beforeAll(async () => {
    backend = await startObservedBackend({ STRATA_IDENTITY_KEYS: key.env });
    await backend.start();
  });
  afterAll(() => backend?.close());

  const hits = () => metric(backend.url, 'vllm:prefix_cache_hits_total');

  it("gives an unverified caller its own prefix-cache namespace: no hit on a verified tenant's prompt", async () => {
    const asAcme = () => identityHeaders(key, { tenant: 'acme' });
    expect((await post(backend.url, { prompt: PROMPT, max_tokens: 1 }, asAcme())).status).toBe(200);
    const cached = await hits();
    // Claims to be acme in every unsigned way, then with a forged signature.
    const claims = [
      { 'x-strata-tenant': 'acme' },
      { ...identityHeaders(forger, { tenant: 'acme' }), 'x-strata-tenant': 'acme' },
    ];
    for (const headers of claims) {
      expect((await post(backend.url, { prompt: PROMPT, max_tokens: 1 }, headers)).status).toBe(200);
      expect(await hits()).toBe(cached + (headers === claims[0] ? 0 : BLOCK_HITS));
    }
    // The second unverified request hit the first one's blocks: one namespace for all of them,
    // apart from acme's, which still hits for acme.
    expect((await post(backend.url, { prompt: PROMPT, max_tokens: 1 }, asAcme())).status).toBe(200);
    expect(await hits()).toBe(cached + 2 * BLOCK_HITS);
    expect(await metric(backend.url, 'strata_backend_identity_total', 'result="verified"')).toBe(2);
    expect(await metric(backend.url, 'strata_backend_identity_total', 'result="missing"')).toBe(1);
    expect(await metric(backend.url, 'strata_backend_identity_total', 'result="bad_signature"')).toBe(1);
  });

  it('hands the engine the signed priority, never one an unverified caller asks for', async () => {
    const body = { prompt: 'The cat', max_tokens: 1 };
    const sent = [
      // Every unsigned claim to urgency there is.
      post(
        backend.url,
        { ...body, priority: -100 },
        { 'x-strata-priority': '-100', 'x-request-id': 'claimed' },
      ),
      // Signed at 50; the body's and the header's asks are not the edge's word.
      post(
        backend.url,
        { ...body, priority: -100 },
        {
          ...identityHeaders(key, { tenant: 'globex', priority: 50, requestId: 'signed' }),
          'x-strata-priority': '-100',
        },
      ),
    ];
    for (const res of await Promise.all(sent)) expect(res.status).toBe(200);
    const finished = (id: string) =>
      backend.logs.find((l) => l.msg === 'request finished' && l.request_id === id);
    expect(finished('claimed')).toMatchObject({ tenant: 'unverified', priority: 100 });
    expect(finished('signed')).toMatchObject({ tenant: 'globex', priority: 50 });
  });
});

describe.skipIf(!tiny.path)(`mode refuse${tiny.skipped}`, () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await startBackend({
      STRATA_WARMUP: 'false',
      STRATA_IDENTITY_KEYS: key.env,
      STRATA_IDENTITY_MODE: 'refuse',
    });
  });
  afterAll(() => backend?.close());

  it('refuses a request without a valid identity with 401 on every inference route', async () => {
    const refused = [
      await post(backend.url, { prompt: 'x', max_tokens: 1 }, { 'x-strata-tenant': 'acme' }),
      await post(backend.url, { prompt: 'x', max_tokens: 1 }, identityHeaders(forger)),
      await post(
        backend.url,
        { prompt: 'x', max_tokens: 1 },
        identityHeaders(key, { expiresAtMs: Date.now() }),
      ),
      await fetch(`${backend.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'x', max_tokens: 1 }),
      }),
      await fetch(`${backend.url}/v1/models`),
    ];
    for (const res of refused) {
      expect(res.status).toBe(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('STRATA_IDENTITY_INVALID');
    }
    expect(backend.host.get().engine.stats().numRunning).toBe(0);
    expect(await metric(backend.url, 'vllm:prompt_tokens_total')).toBe(0);
  });

  it('serves a signed request, and keeps /load and health open to the router and kubelet', async () => {
    const res = await post(
      backend.url,
      { prompt: 'Once upon a time', max_tokens: 3, stream: true },
      identityHeaders(key, { tenant: 'acme' }),
    );
    expect(res.status).toBe(200);
    expect((await readSse(res)).at(-1)).toMatchObject({ type: 'done', usage: { output_tokens: 3 } });
    for (const path of ['/load', '/health/ready', '/health/live', '/metrics']) {
      expect((await fetch(`${backend.url}${path}`)).status, path).toBe(200);
    }
  });
});
