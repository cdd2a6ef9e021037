// Fuzzing the edge in front of the real router and backend: schemathesis (from PyPI) generates
// valid and invalid requests from the edge's own OpenAPI document, then a seeded fuzzer of ours
// sends what no schema describes (random bytes, odd methods and content types, mutated bodies,
// prototype keys, deep nesting). Nothing may answer 5xx, no process may crash, and the backend's
// KV blocks must all be free afterwards.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { LoadReport } from '@strata/common';
import { optionalTestModel, type ServiceProcess, seededRandom } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Stack } from './support/stack.js';

const tiny = optionalTestModel('tinystories-656k');

const run = promisify(execFile);
const KEY = 'sk-fuzz';
const AUTH = { authorization: `Bearer ${KEY}` };
const stack = new Stack();
let edge: ServiceProcess;
let backend: ServiceProcess;

beforeAll(async () => {
  const tenants = join(mkdtempSync(join(tmpdir(), 'edge-fuzz-')), 'tenants.yaml');
  const hash = createHash('sha256').update(KEY).digest('hex');
  writeFileSync(
    tenants,
    `tenants:\n  - {name: fuzz, keys: ["sha256:${hash}"], requests_per_minute: 0, tokens_per_minute: 0}\n`,
  );
  const parts = await stack.backendAndRouter();
  backend = parts.backend;
  edge = await stack.start('edge', '@strata/edge-gateway', {
    STRATA_ROUTER_URL: parts.router.url,
    STRATA_EDGE_TENANTS_FILE: tenants,
    STRATA_EDGE_MAX_BODY_BYTES: '65536',
  });
  await stack.waitServed(edge.url, AUTH);
}, 60_000);

afterAll(async () => {
  await stack.stop();
});

function fuzzCase(rand: () => number) {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)] as T;
  const weird = (depth: number): unknown => {
    switch (Math.floor(rand() * (depth > 4 ? 6 : 9))) {
      case 0:
        return null;
      case 1:
        return rand() < 0.5;
      case 2:
        return pick([0, -1, 1e308, -1e308, 2 ** 53 + 1, 0.5, Number.MAX_SAFE_INTEGER, 1e-320]);
      case 3:
        return pick(['', 'x', '\u0000', '\ud800', '😀'.repeat(50), 'a'.repeat(3000), '{"a":', '__proto__']);
      case 4:
        return -Math.floor(rand() * 10);
      case 5:
        return Math.floor(rand() * 600);
      case 6:
        return Array.from({ length: Math.floor(rand() * 4) }, () => weird(depth + 1));
      case 7:
        return Object.fromEntries(
          Array.from({ length: Math.floor(rand() * 4) }, () => [
            pick(['__proto__', 'constructor', 'prompt', 'messages', 'role', 'content', 'x']),
            weird(depth + 1),
          ]),
        );
      default: {
        let nested: unknown = 1;
        for (let i = 0; i < 2000; i++) nested = [nested];
        return nested;
      }
    }
  };
  const base: Record<string, unknown> = pick([
    { prompt: 'Once upon a time', max_tokens: 4 },
    { prompt: [1, 2, 3], max_tokens: 3, stream: true },
    { prompt: 'Hi', max_tokens: 2, stream: true, stream_options: { include_usage: true } },
    { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 },
  ]);
  const field = pick([
    'prompt',
    'max_tokens',
    'temperature',
    'top_p',
    'top_k',
    'stop',
    'stream',
    'seed',
    'messages',
    'logprobs',
    'stop_token_ids',
    'stream_options',
    'n',
    'priority',
    'model',
  ]);
  const mutated = { ...base, [field]: weird(0) };
  const path = pick([
    '/v1/generate',
    '/v1/completions',
    '/v1/chat/completions',
    '/v1/models',
    '/v1/../v1/models',
    '/v1/generate?x=1',
    '//v1/generate',
    '/v1/generate%00',
  ]);
  const method = pick(['POST', 'POST', 'POST', 'GET', 'PUT', 'DELETE', 'OPTIONS', 'PATCH']);
  const contentType = pick([
    'application/json',
    'application/json',
    'application/json; charset=utf-8',
    'text/plain',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/json; charset=latin1',
    '',
  ]);
  const body = pick([
    () => JSON.stringify(mutated),
    () => JSON.stringify(mutated),
    () => JSON.stringify(weird(0)),
    () =>
      Buffer.from(Array.from({ length: Math.floor(rand() * 2000) }, () => Math.floor(rand() * 256))).toString(
        'latin1',
      ),
    () => JSON.stringify(mutated).slice(0, Math.floor(rand() * 40)),
  ])();
  const headers: Record<string, string> = { ...AUTH };
  if (contentType) headers['content-type'] = contentType;
  if (rand() < 0.2) headers['x-strata-tenant'] = 'admin';
  if (rand() < 0.2) headers['x-request-id'] = pick(['../../etc', 'ok-1', 'x'.repeat(300), 'a b']);
  if (rand() < 0.2)
    headers.traceparent = pick(['00-zz-yy-01', `00-${'0'.repeat(32)}-${'0'.repeat(16)}-01`, 'ff-1-2-3']);
  if (rand() < 0.1) headers.authorization = pick(['Bearer', 'Bearer  ', `Bearer ${KEY} extra`, 'Basic x']);
  return { path, method, headers, body: method === 'GET' || method === 'OPTIONS' ? undefined : body };
}

describe.skipIf(!tiny.path)(`edge fuzzing${tiny.skipped}`, () => {
  it('schemathesis finds no server error in valid or invalid requests from the OpenAPI document', async () => {
    const script = join(dirname(fileURLToPath(import.meta.url)), '..', 'scripts', 'ensure-schemathesis.sh');
    const { stdout: bin } = await run('bash', [script]);
    // The coverage phase is left out: schemathesis 4.32.5 stops with an internal error
    // ("AST constructor recursion depth mismatch") on the chat schema's nested unions.
    const args = [
      'run',
      `${edge.url}/openapi.json`,
      '--header',
      `Authorization: Bearer ${KEY}`,
      '--checks',
      'not_a_server_error,status_code_conformance,content_type_conformance,negative_data_rejection',
      '--phases',
      'examples,fuzzing',
      '--max-examples',
      '60',
      '--workers',
      '2',
      '--seed',
      '20261121',
      // No example database: every run generates afresh, and nothing is written to the tree.
      '--generation-database',
      'none',
      '--no-color',
    ];
    // Run from a scratch folder: schemathesis and hypothesis leave caches in their working directory.
    const cwd = mkdtempSync(join(tmpdir(), 'schemathesis-'));
    const result = await run(bin.trim(), args, { cwd, maxBuffer: 16 * 1024 * 1024 }).then(
      (r) => ({ code: 0, out: r.stdout }),
      (err: { code: number; stdout: string; stderr: string }) => ({
        code: err.code,
        out: `${err.stdout}\n${err.stderr}`,
      }),
    );
    if (result.code !== 0)
      throw new Error(`schemathesis failed (exit ${result.code}):\n${result.out.slice(-6000)}`);
    const summary = /(\d+) generated, (\d+) passed/.exec(result.out);
    expect(summary, result.out.slice(-3000)).not.toBeNull();
    expect(Number(summary?.[2])).toBe(Number(summary?.[1]));
    expect(Number(summary?.[1]), result.out.slice(-3000)).toBeGreaterThan(50);
  }, 240_000);

  it('random and mutated requests never get a 5xx, and the backend frees every KV block', async () => {
    const seed = 20261121;
    const rand = seededRandom(seed);
    const statuses = new Map<number, number>();
    for (let i = 0; i < 400; i++) {
      const c = fuzzCase(rand);
      const res = await fetch(`${edge.url}${c.path}`, {
        method: c.method,
        headers: c.headers,
        ...(c.body !== undefined ? { body: c.body } : {}),
      }).catch((err: Error) => ({ status: -1, text: async () => err.message }));
      const text = await res.text();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      if (res.status < 0 || res.status >= 500) {
        throw new Error(
          `case ${i} (seed ${seed}): ${c.method} ${c.path} -> ${res.status} ${text.slice(0, 300)}`,
        );
      }
    }
    expect(stack.crashed()).toEqual([]);
    // Some cases were valid and generated text, many were refused.
    expect(statuses.get(200) ?? 0).toBeGreaterThanOrEqual(5);
    expect(statuses.get(400) ?? 0).toBeGreaterThan(50);
    await expect
      .poll(async () => {
        const load = (await (await fetch(`${backend.url}/load`)).json()) as LoadReport;
        return load.kv_blocks_free === load.kv_blocks_total && load.live_requests === 0;
      })
      .toBe(true);
  }, 120_000);
});
