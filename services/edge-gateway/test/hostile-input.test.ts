// Hostile input at the edge (issue 23, items 3-5), through the guards of the service base:
// deep JSON, invalid UTF-8 and lone surrogates get a 400 and never reach the router; slow
// clients lose their connection; a long stream is not cut. In process (the real config path,
// applyHttpLimits before listen as bootService does) and as the real process for the timeouts.
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { applyHttpLimits, createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import {
  fuzzGuards,
  nestedJson,
  postBody,
  type ServiceProcess,
  SLOW_CLIENT_TIMEOUT_ENV,
  serviceEntry,
  slowClientProblems,
  startServiceProcess,
  tokenStreamProblems,
  unguardedBodyProblems,
  writeSlowTokenStream,
} from '@strata/common/testing';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { configEnv, configSchema } from '../src/config.js';
import { buildEdgeParts } from '../src/wiring.js';
import { RecordingUpstream } from './support/upstream.js';

const KEY = 'sk-hostile';
const AUTH = { authorization: `Bearer ${KEY}` };
const TIMEOUTS = { ...SLOW_CLIENT_TIMEOUT_ENV, STRATA_HTTP_KEEP_ALIVE_TIMEOUT_MS: '400' };

let upstream: RecordingUpstream;
let tenantsFile: string;
let app: FastifyInstance;
let port: number;
let closeWiring: () => Promise<void>;

beforeAll(async () => {
  upstream = await RecordingUpstream.start();
  tenantsFile = join(mkdtempSync(join(tmpdir(), 'edge-hostile-')), 'tenants.yaml');
  const hash = createHash('sha256').update(KEY).digest('hex');
  writeFileSync(
    tenantsFile,
    `tenants:\n  - {name: acme, keys: ["sha256:${hash}"], requests_per_minute: 0, tokens_per_minute: 0}\n`,
  );
  const config = loadConfig({
    schema: configSchema,
    envMap: configEnv,
    env: { STRATA_ROUTER_URL: upstream.url, STRATA_EDGE_TENANTS_FILE: tenantsFile, ...TIMEOUTS },
  });
  const logger = createLogger({ service: 'edge-gateway', level: 'silent' });
  const metrics = createMetrics('edge-gateway', { defaultMetrics: false });
  const wiring = await buildEdgeParts(config, logger, metrics.registry);
  closeWiring = wiring.close;
  app = buildApp({ config, logger, metrics, readiness: new Readiness() }, wiring.parts);
  applyHttpLimits(app, config.http);
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as { port: number }).port;
});
afterAll(async () => {
  await app?.close();
  await closeWiring?.();
  await upstream?.close();
});

const post = (path: string, body: Buffer | string) => postBody(`http://127.0.0.1:${port}${path}`, body, AUTH);

describe('edge: hostile JSON bodies', () => {
  it('answers 5,000 levels of nesting in an unknown field 400 STRATA_BODY_TOO_DEEP, not 500', async () => {
    const body = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      extra: 0,
    }).replace('"extra":0', `"extra":${nestedJson('mixed', 5000)}`);
    for (const path of ['/v1/chat/completions', '/v1/completions', '/v1/generate']) {
      const res = await post(path, body);
      expect([path, res.status]).toEqual([path, 400]);
      expect(JSON.parse(res.body).error.code).toBe('STRATA_BODY_TOO_DEEP');
      expect(JSON.parse(res.body).error.message).toContain('deeper than 128 levels');
    }
  });

  it('fuzz: no 5xx on any endpoint, and nothing the guards refuse reaches the router', async () => {
    upstream.received.length = 0;
    const endpoints = [
      {
        path: '/v1/chat/completions',
        base: { model: 'm', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4 },
        textPath: ['messages', 0, 'content'],
      },
      {
        path: '/v1/completions',
        base: { model: 'm', prompt: 'Once upon a time', max_tokens: 4 },
        textPath: ['prompt'],
      },
      { path: '/v1/generate', base: { prompt: 'Once upon a time', max_tokens: 4 }, textPath: ['prompt'] },
    ];
    for (const { path, base, textPath } of endpoints) {
      const limits = { base, textPath, maxJsonDepth: app.httpLimits.maxJsonDepth, bodyLimit: 1024 * 1024 };
      const report = await fuzzGuards(`edge ${path}`, limits, (body) => post(path, body));
      expect(report.problems).toEqual([]);
    }
    expect(upstream.received.length).toBeGreaterThan(100);
    expect(upstream.received.flatMap((r) => unguardedBodyProblems(r.body, 128))).toEqual([]);
    expect((await fetch(`http://127.0.0.1:${port}/health/live`)).status).toBe(200);
  });

  it('rejects a header that is not UTF-8 before it is forwarded', async () => {
    upstream.received.length = 0;
    const send = (value: string) =>
      fetch(`http://127.0.0.1:${port}/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...AUTH, 'x-session-id': value },
        body: '{"prompt":"hi","max_tokens":1}',
      });
    // undici writes a header string's chars as bytes (latin1): these are C3 A9 and C3 28.
    expect((await send('caf\u00c3\u00a9')).status).toBe(200);
    const bad = await send('caf\u00c3(');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: unknown }).error).toMatchObject({
      code: 'STRATA_INVALID_ENCODING',
      message: 'The value of header x-session-id is not valid UTF-8 (byte offset 3 of the value).',
    });
    // Before auth: a request without a key gets the same 400.
    const anonymous = await fetch(`http://127.0.0.1:${port}/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-session-id': 'caf\u00c3(' },
      body: '{"prompt":"hi"}',
    });
    expect(anonymous.status).toBe(400);
    expect(upstream.received).toHaveLength(1);
  });
});

describe('edge: slow clients', () => {
  it('closes the connection of a client with a valid key sending its body a byte at a time (408)', async () => {
    const problems = await slowClientProblems({
      target: port,
      slowBody: {
        requestLine: 'POST /v1/generate HTTP/1.1',
        headers: { Authorization: `Bearer ${KEY}` },
        body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4 }),
      },
    });
    expect(problems).toEqual([]);
  });

  it('does not cut a stream from the router that lasts longer than the request timeout', async () => {
    upstream.answer = (_req, res) =>
      writeSlowTokenStream(res, 15, {
        finish_reason: 'length',
        usage: { input_tokens: 1, output_tokens: 15 },
      });
    const started = performance.now();
    const res = await post('/v1/generate', JSON.stringify({ prompt: 'x', max_tokens: 15, stream: true }));
    expect(performance.now() - started).toBeGreaterThan(1200);
    expect(tokenStreamProblems(res, 15)).toEqual([]);
  });

  describe('the edge process', () => {
    let edge: ServiceProcess;
    beforeAll(async () => {
      edge = await startServiceProcess('edge', serviceEntry('@strata/edge-gateway', import.meta.url), {
        env: { STRATA_ROUTER_URL: upstream.url, STRATA_EDGE_TENANTS_FILE: tenantsFile, ...TIMEOUTS },
      });
    });
    afterAll(async () => {
      await edge?.stop('SIGKILL');
    });

    it('takes its timeouts from the environment: slow headers and slow bodies lose the connection', async () => {
      const problems = await slowClientProblems({
        target: edge.url,
        slowHeaders: 'GET /v1/models HTTP/1.1\r\nHost: x\r\n',
        slowBody: {
          requestLine: 'POST /v1/generate HTTP/1.1',
          headers: { Authorization: `Bearer ${KEY}` },
          body: '{"prompt":"Once upon a time"}',
        },
      });
      expect(problems).toEqual([]);
      expect(edge.child.exitCode).toBeNull();
    });
  });
});
