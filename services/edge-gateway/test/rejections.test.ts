// Every kind of bad request gets its exact status, code and message from the edge, and none of
// them reaches the router (a real HTTP server here that records what arrives).
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEdge, type TestEdge } from './support/edge.js';
import { RecordingUpstream } from './support/upstream.js';

const KEY = 'sk-test-acme';
const sha = (key: string) => `sha256:${createHash('sha256').update(key).digest('hex')}`;

let upstream: RecordingUpstream;
let edge: TestEdge;

beforeAll(async () => {
  upstream = await RecordingUpstream.start();
  const dir = mkdtempSync(join(tmpdir(), 'edge-'));
  const tenants = join(dir, 'tenants.yaml');
  writeFileSync(tenants, `tenants:\n  - name: acme\n    keys: ["${sha(KEY)}"]\n`);
  edge = await startEdge({
    STRATA_ROUTER_URL: upstream.url,
    STRATA_EDGE_TENANTS_FILE: tenants,
    STRATA_EDGE_MAX_BODY_BYTES: '4096',
  });
});
afterAll(async () => {
  await edge?.close();
  await upstream?.close();
});

interface Row {
  name: string;
  path?: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  status: number;
  code: string;
  message: string;
  reason: string;
}

const auth = { authorization: `Bearer ${KEY}` };
const json = { 'content-type': 'application/json', ...auth };
const invalid = (detail: string) => `Invalid request: ${detail}`;

const rows: Row[] = [
  {
    name: 'no API key',
    headers: { 'content-type': 'application/json' },
    body: '{"prompt":"x"}',
    status: 401,
    code: 'STRATA_UNAUTHORIZED',
    message: 'Send an API key as "Authorization: Bearer <key>".',
    reason: 'auth',
  },
  {
    name: 'an unknown API key',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-nope' },
    body: '{"prompt":"x"}',
    status: 401,
    code: 'STRATA_UNAUTHORIZED',
    message: 'The API key is not valid.',
    reason: 'auth',
  },
  {
    name: 'Basic auth instead of Bearer',
    headers: { 'content-type': 'application/json', authorization: 'Basic c2stdGVzdC1hY21lOg==' },
    body: '{"prompt":"x"}',
    status: 401,
    code: 'STRATA_UNAUTHORIZED',
    message: 'Send an API key as "Authorization: Bearer <key>".',
    reason: 'auth',
  },
  {
    name: 'models without a key',
    method: 'GET',
    path: '/v1/models',
    status: 401,
    code: 'STRATA_UNAUTHORIZED',
    message: 'Send an API key as "Authorization: Bearer <key>".',
    reason: 'auth',
  },
  {
    name: 'malformed JSON',
    headers: json,
    body: '{"prompt": "x",',
    status: 400,
    code: 'STRATA_INVALID_JSON',
    message: "Body is not valid JSON but content-type is set to 'application/json'",
    reason: 'validation',
  },
  {
    name: 'an empty JSON body',
    headers: json,
    body: '',
    status: 400,
    code: 'STRATA_INVALID_JSON',
    message: "Body cannot be empty when content-type is set to 'application/json'",
    reason: 'validation',
  },
  {
    name: 'a JSON array',
    headers: json,
    body: '[]',
    status: 400,
    code: 'STRATA_INVALID_REQUEST',
    message: invalid('body: Invalid input: expected object, received array'),
    reason: 'validation',
  },
  {
    name: 'a missing prompt',
    headers: json,
    body: '{"max_tokens":5}',
    status: 400,
    code: 'STRATA_INVALID_REQUEST',
    message: invalid('prompt: prompt must be a non-empty string or a non-empty list of token ids'),
    reason: 'validation',
  },
  {
    name: 'a wrong type',
    headers: json,
    body: '{"prompt":"x","max_tokens":"5"}',
    status: 400,
    code: 'STRATA_INVALID_REQUEST',
    message: invalid('max_tokens: Invalid input: expected number, received string'),
    reason: 'validation',
  },
  {
    name: 'out of range and a misspelt field',
    headers: json,
    body: '{"prompt":"x","top_p":1.5,"temprature":0.5}',
    status: 400,
    code: 'STRATA_INVALID_REQUEST',
    message: invalid('top_p: Too big: expected number to be <=1; body: Unrecognized key: "temprature"'),
    reason: 'validation',
  },
  {
    name: 'chat without messages',
    path: '/v1/chat/completions',
    headers: json,
    body: '{"messages":[]}',
    status: 400,
    code: 'STRATA_INVALID_REQUEST',
    message: invalid('messages: messages must hold at least one message'),
    reason: 'validation',
  },
  {
    name: 'completions with stream_options but no stream',
    path: '/v1/completions',
    headers: json,
    body: '{"prompt":"x","stream_options":{"include_usage":true}}',
    status: 400,
    code: 'STRATA_INVALID_PARAM',
    message: 'stream_options is only allowed when stream is true',
    reason: 'validation',
  },
  {
    name: 'an oversized body',
    headers: json,
    body: JSON.stringify({ prompt: 'x'.repeat(5000) }),
    status: 413,
    code: 'STRATA_BODY_TOO_LARGE',
    message: 'Request body is too large',
    reason: 'size',
  },
  {
    name: 'text/plain',
    headers: { 'content-type': 'text/plain', ...auth },
    body: 'hello',
    status: 415,
    code: 'STRATA_UNSUPPORTED_MEDIA_TYPE',
    message: 'Send the body as application/json.',
    reason: 'content_type',
  },
  {
    name: 'a form body',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...auth },
    body: 'prompt=x',
    status: 415,
    code: 'STRATA_UNSUPPORTED_MEDIA_TYPE',
    message: 'Send the body as application/json.',
    reason: 'content_type',
  },
  {
    name: 'an unknown route',
    path: '/v1/embeddings',
    headers: json,
    body: '{"input":"x"}',
    status: 404,
    code: 'STRATA_NOT_FOUND',
    message: 'No route POST /v1/embeddings.',
    reason: 'not_found',
  },
  {
    name: 'a known route with another method',
    method: 'GET',
    path: '/v1/completions',
    headers: auth,
    status: 405,
    code: 'STRATA_METHOD_NOT_ALLOWED',
    message: 'GET is not allowed on /v1/completions; use POST.',
    reason: 'not_found',
  },
];

describe('edge rejections', () => {
  it.each(rows)('$name -> $status $code', async (row) => {
    const before = await edge.metric('strata_edge_rejections_total', { code: row.code, reason: row.reason });
    const rejectedBefore = await edge.metric('strata_edge_requests_total', { outcome: 'rejected' });
    const res = await fetch(`${edge.url}${row.path ?? '/v1/generate'}`, {
      method: row.method ?? 'POST',
      headers: row.headers ?? {},
      ...(row.body !== undefined ? { body: row.body } : {}),
    });
    expect(res.status).toBe(row.status);
    const body = await res.json();
    expect(body).toEqual({
      error: { code: row.code, message: row.message, type: row.status === 401 ? 'auth' : 'invalid_request' },
    });
    expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    if (row.status === 401) expect(res.headers.get('www-authenticate')).toBe('Bearer');
    if (row.status === 405) expect(res.headers.get('allow')).toBe('POST');
    expect(await edge.metric('strata_edge_rejections_total', { code: row.code, reason: row.reason })).toBe(
      before + 1,
    );
    expect(await edge.metric('strata_edge_requests_total', { outcome: 'rejected' })).toBe(rejectedBefore + 1);
  });

  it('let none of them reach the router', () => {
    expect(upstream.received).toEqual([]);
  });

  it('forwards a good request with internal headers stripped and the edge its own', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const res = await fetch(`${edge.url}/v1/generate`, {
      method: 'POST',
      headers: {
        ...json,
        'x-request-id': 'client-req-1',
        traceparent: `00-${traceId}-00f067aa0ba902b7-01`,
        'x-strata-tenant': 'someone-else',
        'x-strata-backend': 'backend-7',
        'x-strata-route': 'vip',
        'x-strata-identity': 'v1.k1.eyJ0ZW4iOiJhZG1pbiJ9.forged',
        'x-session-id': 'sess-1',
      },
      body: '{"prompt":"x","max_tokens":2}',
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toBe('client-req-1');
    await res.arrayBuffer();
    expect(upstream.received).toHaveLength(1);
    const got = upstream.received[0];
    expect(got?.path).toBe('/v1/generate');
    expect(JSON.parse(got?.body ?? '')).toEqual({ prompt: 'x', max_tokens: 2, stream: false });
    expect(got?.headers['x-strata-tenant']).toBe('acme');
    expect(got?.headers['x-strata-backend']).toBeUndefined();
    expect(got?.headers['x-strata-route']).toBeUndefined();
    // No identity keys here: nothing is signed, and the client's identity never goes on.
    expect(got?.headers['x-strata-identity']).toBeUndefined();
    expect(got?.headers['x-strata-priority']).toBe('0');
    expect(got?.headers['x-request-id']).toBe('client-req-1');
    expect(got?.headers['x-session-id']).toBe('sess-1');
    expect(got?.headers.authorization).toBeUndefined();
    // A child span of the client's: same trace, the edge's own span id.
    expect(got?.headers.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(got?.headers.traceparent).not.toContain('00f067aa0ba902b7');
  });

  it('starts a trace when the client sent none', async () => {
    upstream.received.length = 0;
    const res = await fetch(`${edge.url}/v1/models`, { headers: { ...auth, traceparent: 'garbage' } });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(upstream.received[0]?.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  });
});
