// What the edge vouches for: each forwarded request carries an x-strata-identity signed with the
// first STRATA_IDENTITY_KEYS key, naming the authenticated tenant, its tier and the priority the
// edge granted (the client's ask clamped to the tier); the header and body priority the backend
// reads today carry the same value. A real edge in front of a real HTTP server recording what
// arrives; the signatures are checked with the verifier the router and backends use.
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyIdentity } from '@strata/common';
import { testIdentityKey } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEdge, type TestEdge } from './support/edge.js';
import { type Received, RecordingUpstream } from './support/upstream.js';

const sha = (key: string) => `sha256:${createHash('sha256').update(key).digest('hex')}`;
const signing = testIdentityKey('new');
const previous = testIdentityKey('old');

let upstream: RecordingUpstream;
let edge: TestEdge;

beforeAll(async () => {
  upstream = await RecordingUpstream.start();
  const tenants = join(mkdtempSync(join(tmpdir(), 'edge-identity-')), 'tenants.yaml');
  writeFileSync(
    tenants,
    [
      'tenants:',
      `  - { name: gold, keys: ["${sha('sk-gold')}"], tier: premium }`,
      `  - { name: plain, keys: ["${sha('sk-plain')}"] }`,
      `  - { name: cheap, keys: ["${sha('sk-cheap')}"], tier: free }`,
      '',
    ].join('\n'),
  );
  edge = await startEdge({
    STRATA_ROUTER_URL: upstream.url,
    STRATA_EDGE_TENANTS_FILE: tenants,
    // Mid-rotation: the first key signs; the second is only for verifiers.
    STRATA_IDENTITY_KEYS: `${signing.env},${previous.env}`,
  });
});
afterAll(async () => {
  await edge?.close();
  await upstream?.close();
});

async function send(
  key: string,
  options: { path?: string; body?: Record<string, unknown>; headers?: Record<string, string> } = {},
): Promise<Received> {
  const path = options.path ?? '/v1/generate';
  const res = await fetch(`${edge.url}${path}`, {
    method: options.body ? 'POST' : 'GET',
    headers: {
      authorization: `Bearer ${key}`,
      ...(options.body ? { 'content-type': 'application/json' } : {}),
      ...options.headers,
    },
    ...(options.body ? { body: JSON.stringify(options.body) } : {}),
  });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
  const got = upstream.received.at(-1);
  if (!got) throw new Error('nothing reached the upstream');
  return got;
}

function identityOf(got: Received) {
  const header = got.headers['x-strata-identity'];
  const checked = verifyIdentity(
    typeof header === 'string' ? header : undefined,
    [signing],
    Date.now(),
    got.headers['x-request-id'] as string,
  );
  if (!checked.ok) throw new Error(`identity not valid: ${checked.reason}`);
  return checked.identity;
}

describe('the signed identity', () => {
  it('names the tenant, tier, granted priority and request id, signed with the first key', async () => {
    const got = await send('sk-gold', {
      body: { prompt: 'x', max_tokens: 1 },
      headers: {
        'x-request-id': 'id-req-1',
        // A client cannot bring its own identity or tenant.
        'x-strata-identity': 'v1.new.eyJ0ZW4iOiJhZG1pbiJ9.AAAA',
        'x-strata-tenant': 'admin',
      },
    });
    expect((got.headers['x-strata-identity'] as string).split('.').slice(0, 2)).toEqual(['v1', 'new']);
    const identity = identityOf(got);
    expect(identity).toMatchObject({ tenant: 'gold', tier: 'premium', priority: -50, requestId: 'id-req-1' });
    // Short-lived: it is checked on arrival at each hop.
    expect(identity.expiresAtMs - Date.now()).toBeGreaterThan(50_000);
    expect(identity.expiresAtMs - Date.now()).toBeLessThanOrEqual(60_000);
    expect(got.headers['x-strata-tenant']).toBe('gold');
    expect(verifyIdentity(got.headers['x-strata-identity'] as string, [previous], Date.now())).toEqual({
      ok: false,
      reason: 'unknown_key',
    });
  });

  it('is signed on every route, GET /v1/models included', async () => {
    const got = await send('sk-plain', { path: '/v1/models' });
    expect(identityOf(got)).toMatchObject({ tenant: 'plain', tier: 'standard', priority: 0 });
  });
});

describe('priority by tier', () => {
  it.each([
    // tenant, what the client asks (body, header), what the edge grants
    ['sk-cheap', { priority: -100 }, undefined, 50],
    ['sk-cheap', {}, '-100', 50],
    ['sk-cheap', {}, undefined, 75],
    ['sk-cheap', { priority: 90 }, '-100', 90],
    ['sk-plain', { priority: -100 }, undefined, 0],
    ['sk-plain', {}, '100', 49],
    ['sk-plain', {}, 'urgent', 0],
    ['sk-gold', { priority: 100 }, undefined, -1],
    ['sk-gold', { priority: -80 }, undefined, -80],
  ])('%s asking body %o header %s gets %i', async (key, ask, header, granted) => {
    const got = await send(key, {
      body: { prompt: 'x', max_tokens: 1, ...ask },
      ...(header !== undefined ? { headers: { 'x-strata-priority': header } } : {}),
    });
    expect(identityOf(got).priority).toBe(granted);
    expect(got.headers['x-strata-priority']).toBe(String(granted));
    // A body that asked carries the granted value; one that did not stays as it was.
    const body = JSON.parse(got.body);
    if ('priority' in ask) expect(body.priority).toBe(granted);
    else expect(body).not.toHaveProperty('priority');
  });

  it('applies to the OpenAI routes too', async () => {
    const got = await send('sk-cheap', {
      path: '/v1/chat/completions',
      body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], priority: -100 },
    });
    expect(identityOf(got).priority).toBe(50);
    expect(JSON.parse(got.body).priority).toBe(50);
  });
});
