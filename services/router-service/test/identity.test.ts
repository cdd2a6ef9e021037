// The router trusts only the edge's signed identity (docs/router.md, Identity): a real listening
// router (port 0) in front of recording backends, in both modes. A signed request is routed by
// its tenant and granted priority and its identity goes on unchanged; an unsigned or forged one
// is routed as tenant "unverified" at priority 100 (mode anonymous) or refused with 401 before
// any backend sees it (mode refuse).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { identityHeaders, testIdentityKey } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeBackend } from './support/fake-backend.js';
import { buildTestRouter, type TestRouter } from './support/router.js';

const current = testIdentityKey('new');
const previous = testIdentityKey('old');
const stranger = testIdentityKey('new'); // same id, another secret: a forger's guess
const backends: Record<string, FakeBackend> = {};
let dir: string;
let routesFile: string;

interface Listening extends TestRouter {
  url: string;
}

async function startRouter(env: Record<string, string>): Promise<Listening> {
  const router = await buildTestRouter({ STRATA_ROUTES_FILE: routesFile, ...env }, ['vip', 'urgent', 'rest']);
  await router.app.listen({ host: '127.0.0.1', port: 0 });
  return { ...router, url: `http://127.0.0.1:${(router.app.server.address() as AddressInfo).port}` };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'strata-router-identity-'));
  for (const name of ['vip', 'urgent', 'rest']) {
    const backend = await FakeBackend.start();
    backend.answer = { status: 200, json: { served_by: name } };
    backends[name] = backend;
  }
  const b = (name: string) => `{ backends: [{ name: ${name}, url: "${backends[name]?.url}" }] }`;
  routesFile = join(dir, 'routes.yaml');
  writeFileSync(
    routesFile,
    `pools: { vip: ${b('vip')}, urgent: ${b('urgent')}, rest: ${b('rest')} }
rules:
  - { name: acme, match: { tenant: acme }, pool: vip }
  - { name: urgent, match: { priority: { max: -1 } }, pool: urgent }
default: { pool: rest }
`,
  );
});

afterAll(async () => {
  await Promise.all(Object.values(backends).map((b) => b.close()));
  rmSync(dir, { recursive: true, force: true });
});

const generate = (url: string, headers: Record<string, string>, body: Record<string, unknown> = {}) =>
  fetch(`${url}/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ prompt: 'hi', ...body }),
  });

const decision = (r: TestRouter, requestId: string) =>
  r.lines.find((l) => l.msg === 'route decision' && l.request_id === requestId);

async function identityCount(url: string, result: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = new RegExp(`^strata_router_identity_total\\{result="${result}"[^}]*\\} (\\d+)$`, 'm').exec(text);
  return Number(m?.[1] ?? 0);
}

// A request that claims, in every unsigned way there is, to be acme at the top priority.
const claims = { 'x-strata-tenant': 'acme', 'x-strata-priority': '-100' };

describe('mode anonymous', () => {
  let router: Listening;
  beforeAll(async () => {
    // Mid-rotation: both keys verify.
    router = await startRouter({ STRATA_IDENTITY_KEYS: `${current.env},${previous.env}` });
  });
  afterAll(() => router?.close());

  it('routes a signed request by its tenant and priority, and forwards its identity unchanged', async () => {
    for (const key of [current, previous]) {
      const headers = identityHeaders(key, { tenant: 'acme', tier: 'premium', priority: -50 });
      const res = await generate(router.url, headers);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ served_by: 'vip' });
      const got = backends.vip?.received.at(-1);
      expect(got?.headers['x-strata-identity']).toBe(headers['x-strata-identity']);
      expect(decision(router, headers['x-request-id'] as string)).toMatchObject({
        rule: 'acme',
        tenant: 'acme',
        tier: 'premium',
        priority: -50,
        identity: 'verified',
      });
    }
    const urgent = identityHeaders(current, { tenant: 'globex', tier: 'premium', priority: -5 });
    expect(await (await generate(router.url, urgent)).json()).toEqual({ served_by: 'urgent' });
    expect(await identityCount(router.url, 'verified')).toBe(3);
  });

  it('routes unsigned and forged requests as tenant "unverified" at priority 100', async () => {
    const forged: [string, Record<string, string>, Record<string, unknown>][] = [
      ['missing', { 'x-request-id': 'anon-1', ...claims }, { priority: -100 }],
      [
        'bad_signature',
        { ...identityHeaders(stranger, { tenant: 'acme', priority: -100, requestId: 'anon-2' }), ...claims },
        {},
      ],
      [
        'expired',
        identityHeaders(current, { tenant: 'acme', requestId: 'anon-3', expiresAtMs: Date.now() - 1 }),
        {},
      ],
      [
        'request_id_mismatch',
        { ...identityHeaders(current, { tenant: 'acme', priority: -100 }), 'x-request-id': 'anon-4' },
        {},
      ],
    ];
    for (const [reason, headers, body] of forged) {
      const res = await generate(router.url, headers, body);
      expect(res.status, reason).toBe(200);
      expect(await res.json(), reason).toEqual({ served_by: 'rest' });
      expect(decision(router, headers['x-request-id'] as string), reason).toMatchObject({
        rule: 'default',
        tenant: 'unverified',
        tier: 'unverified',
        priority: 100,
        identity: reason,
      });
      expect(await identityCount(router.url, reason), reason).toBe(1);
    }
    // Each reason is logged once, with what the caller claimed.
    const warned = router.lines.filter((l) => l.level === 'warn' && l.identity !== undefined);
    expect(warned.map((l) => l.identity)).toEqual([
      'missing',
      'bad_signature',
      'expired',
      'request_id_mismatch',
    ]);
    expect(warned[0]).toMatchObject({ claimed_tenant: 'acme', mode: 'anonymous' });
  });
});

describe('mode refuse', () => {
  let router: Listening;
  beforeAll(async () => {
    router = await startRouter({ STRATA_IDENTITY_KEYS: current.env, STRATA_IDENTITY_MODE: 'refuse' });
  });
  afterAll(() => router?.close());

  it('refuses unsigned, forged and rotated-out identities with 401 before any backend sees them', async () => {
    const before = Object.values(backends).reduce((n, b) => n + b.received.length, 0);
    const refused = [
      { 'x-request-id': 'ref-1', ...claims },
      identityHeaders(stranger, { tenant: 'acme' }),
      identityHeaders(previous, { tenant: 'acme' }),
    ];
    for (const headers of refused) {
      const res = await generate(router.url, headers);
      expect(res.status).toBe(401);
      expect(((await res.json()) as { error: unknown }).error).toMatchObject({
        code: 'STRATA_IDENTITY_INVALID',
        type: 'auth',
      });
    }
    const models = await fetch(`${router.url}/v1/models`);
    expect(models.status).toBe(401);
    await models.arrayBuffer();
    expect(Object.values(backends).reduce((n, b) => n + b.received.length, 0)).toBe(before);
    expect([
      await identityCount(router.url, 'missing'),
      await identityCount(router.url, 'bad_signature'),
      await identityCount(router.url, 'unknown_key'),
    ]).toEqual([2, 1, 1]);
    // Health, load and metrics stay open to probes and Prometheus.
    expect((await fetch(`${router.url}/health/ready`)).status).toBe(200);
  });

  it('serves a signed request', async () => {
    const res = await generate(router.url, identityHeaders(current, { tenant: 'acme' }));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ served_by: 'vip' });
  });
});
