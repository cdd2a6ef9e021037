// The whole path with real processes: two edge replicas sharing a real Redis, the router, and an
// inference backend running tinystories-656k on the CPU engine. Logs of every hop are collected
// to follow one request through them. As the chart runs them, the router and the backend refuse
// what does not carry the edges' signed identity.
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  identityHeaders,
  optionalTestModel,
  type ServiceProcess,
  SpawnedRedis,
  testIdentityKey,
} from '@strata/common/testing';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Stack, scrape } from './support/stack.js';

const tiny = optionalTestModel('tinystories-656k');

const sha = (key: string) => `sha256:${createHash('sha256').update(key).digest('hex')}`;
const stack = new Stack();
const logs = stack.logs;
let redis: SpawnedRedis;
let edgeA: ServiceProcess;
let edgeB: ServiceProcess;
let router: ServiceProcess;
let backend: ServiceProcess;
const identityKey = testIdentityKey('e2e');

beforeAll(async () => {
  redis = await SpawnedRedis.start();
  const tenants = join(mkdtempSync(join(tmpdir(), 'edge-e2e-')), 'tenants.yaml');
  writeFileSync(
    tenants,
    [
      'tenants:',
      `  - {name: acme, keys: ["${sha('sk-acme')}"]}`,
      `  - {name: pair, keys: ["${sha('sk-pair')}"], requests_per_minute: 4}`,
      `  - {name: meter, keys: ["${sha('sk-meter')}"], tokens_per_minute: 60}`,
      `  - {name: vip, keys: ["${sha('sk-vip')}"], tier: premium}`,
      '',
    ].join('\n'),
  );
  ({ router, backend } = await stack.backendAndRouter({
    STRATA_IDENTITY_KEYS: identityKey.env,
    STRATA_IDENTITY_MODE: 'refuse',
  }));
  const edgeEnv = {
    STRATA_ROUTER_URL: router.url,
    REDIS_URL: redis.url,
    STRATA_EDGE_TENANTS_FILE: tenants,
    STRATA_IDENTITY_KEYS: identityKey.env,
  };
  [edgeA, edgeB] = await Promise.all([
    stack.start('edge-a', '@strata/edge-gateway', edgeEnv),
    stack.start('edge-b', '@strata/edge-gateway', edgeEnv),
  ]);
  await stack.waitServed(edgeA.url, { authorization: 'Bearer sk-acme' });
}, 60_000);

afterAll(async () => {
  await stack.stop();
  await redis?.stop();
});

describe.skipIf(!tiny.path)(`edge -> router -> backend${tiny.skipped}`, () => {
  it('streams a generation with one request id and one trace id in every hop', async () => {
    const requestId = 'e2e-stream-1';
    const traceId = 'aaaabbbbccccddddeeeeffff00001111';
    const res = await fetch(`${edgeA.url}/v1/generate`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer sk-acme',
        'x-request-id': requestId,
        traceparent: `00-${traceId}-1111222233334444-01`,
      },
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 12, stream: true, ignore_eos: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(res.headers.get('x-request-id')).toBe(requestId);
    expect(res.headers.get('x-strata-backend')).toBe('local');
    const events = (await res.text())
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map(
        (e) =>
          JSON.parse(e.slice(6)) as { type: string; usage?: { input_tokens: number; output_tokens: number } },
      );
    expect(events.filter((e) => e.type === 'token')).toHaveLength(12);
    expect(events.at(-1)).toMatchObject({
      type: 'done',
      finish_reason: 'length',
      usage: { output_tokens: 12 },
    });

    for (const hop of ['edge-a', 'router', 'backend']) {
      await expect
        .poll(() => (logs.get(hop) ?? []).some((l) => l.request_id === requestId && l.trace_id === traceId), {
          timeout: 5_000,
        })
        .toBe(true);
    }
    // The edge's line says who was served and what it cost.
    const forwarded = logs
      .get('edge-a')
      ?.find((l) => l.request_id === requestId && l.msg === 'request forwarded');
    const usage = events.at(-1)?.usage;
    expect(forwarded).toMatchObject({ tenant: 'acme', outcome: 'forwarded', status: 200 });
    expect(forwarded?.tokens).toBe((usage?.input_tokens ?? 0) + (usage?.output_tokens ?? 0));
  });

  it('carries the signed tenant and priority to the backend; the router and backend refuse anything else', async () => {
    const res = await fetch(`${edgeA.url}/v1/generate`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer sk-vip',
        'x-request-id': 'e2e-vip',
      },
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 2, priority: 100 }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const line = (hop: string, msg: string) =>
      logs.get(hop)?.find((l) => l.request_id === 'e2e-vip' && l.msg === msg);
    await expect
      .poll(() => line('backend', 'request finished'))
      .toMatchObject({ tenant: 'vip', priority: -1 });
    await expect
      .poll(() => line('router', 'route decision'))
      .toMatchObject({
        tenant: 'vip',
        tier: 'premium',
        priority: -1,
        identity: 'verified',
      });
    await expect
      .poll(() => line('edge-a', 'request forwarded'))
      .toMatchObject({ tenant: 'vip', tier: 'premium', priority: -1 });

    // Straight to the router or the backend, past the edge: no identity, or a forged one.
    const forger = testIdentityKey('e2e');
    for (const url of [router.url, backend.url]) {
      for (const headers of [{ 'x-strata-tenant': 'vip' }, identityHeaders(forger, { tenant: 'vip' })]) {
        const direct = await fetch(`${url}/v1/generate`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 2 }),
        });
        expect(direct.status, url).toBe(401);
        expect(((await direct.json()) as { error: { code: string } }).error.code).toBe(
          'STRATA_IDENTITY_INVALID',
        );
      }
    }
    // The edge's own signature, sent by the test as the edge would, is what the router takes.
    const signed = await fetch(`${router.url}/v1/models`, { headers: identityHeaders(identityKey) });
    expect(signed.status).toBe(200);
    await signed.arrayBuffer();
    expect(await scrape(router.url, 'strata_router_identity_total', { result: 'bad_signature' })).toBe(1);
    expect(await scrape(backend.url, 'strata_backend_identity_total', { result: 'missing' })).toBe(1);
  });

  it('works with the official openai client, streaming and not', async () => {
    const client = new OpenAI({ baseURL: `${edgeB.url}/v1`, apiKey: 'sk-acme', maxRetries: 0 });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['tinystories-656k']);
    const completion = await client.completions.create({
      model: 'tinystories-656k',
      prompt: 'Once upon a time',
      max_tokens: 5,
    });
    expect(completion.usage?.completion_tokens).toBe(5);
    const stream = await client.completions.create({
      model: 'tinystories-656k',
      prompt: 'Once upon a time',
      max_tokens: 5,
      stream: true,
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    // The edge asked for the usage chunk to charge it; this client did not ask, so sees none.
    expect(chunks.some((c) => c.usage)).toBe(false);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('length');
    await expect(
      client.completions.create({ model: 'tinystories-656k', prompt: 'x', top_p: 7 }),
    ).rejects.toMatchObject({
      status: 400,
    });
    await expect(
      new OpenAI({ baseURL: `${edgeB.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 }).models.list(),
    ).rejects.toMatchObject({ status: 401 });
  });

  it('holds one request quota across both edge replicas', async () => {
    // 4 per minute for "pair": a slot comes back every 15 s, longer than these requests take.
    const statuses = [];
    for (let i = 0; i < 6; i++) {
      const edge = i % 2 === 0 ? edgeA : edgeB;
      const res = await fetch(`${edge.url}/v1/models`, { headers: { authorization: 'Bearer sk-pair' } });
      await res.arrayBuffer();
      statuses.push(res.status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429]);
  });

  it('charges the tokens the backend reported, on the replica that served, for both', async () => {
    const auth = { 'content-type': 'application/json', authorization: 'Bearer sk-meter' };
    const res = await fetch(`${edgeA.url}/v1/generate`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 100, ignore_eos: true }),
    });
    const body = (await res.json()) as { usage: { input_tokens: number; output_tokens: number } };
    const used = body.usage.input_tokens + body.usage.output_tokens;
    expect(used).toBeGreaterThan(100);
    await expect
      .poll(() => scrape(edgeA.url, 'strata_edge_tokens_charged_total', { tenant: 'meter' }))
      .toBe(used);
    // 60 tokens per minute, more than that used: the other replica refuses until the debt is repaid.
    const refused = await fetch(`${edgeB.url}/v1/generate`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ prompt: 'x' }),
    });
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('STRATA_QUOTA_EXCEEDED');
  });

  it('keeps serving without quotas while Redis is down (fail open), and enforces them again after', async () => {
    await redis.stop();
    const res = await fetch(`${edgeA.url}/v1/models`, { headers: { authorization: 'Bearer sk-pair' } });
    expect(res.status).toBe(200); // "pair" is over its quota, but nobody can tell now
    expect(await scrape(edgeA.url, 'strata_edge_quota_store_up', {})).toBe(0);
    expect(await scrape(edgeA.url, 'strata_edge_quota_store_errors_total', { op: 'admit' })).toBeGreaterThan(
      0,
    );
    expect(
      logs
        .get('edge-a')
        ?.some(
          (l) => l.msg === 'quota store unreachable: admitting requests without quotas until it is back',
        ),
    ).toBe(true);
    await redis.restart(); // empty: the buckets start full again
    await expect
      .poll(
        async () => {
          await fetch(`${edgeA.url}/v1/models`, { headers: { authorization: 'Bearer sk-acme' } });
          return scrape(edgeA.url, 'strata_edge_quota_store_up', {});
        },
        { timeout: 10_000, interval: 200 },
      )
      .toBe(1);
  });
});
