// Hostile input at the router (issue 23, items 3-5), through the guards of the service base it
// is built on: the real router process in front of a real HTTP backend that records what
// arrives. Deep JSON, invalid UTF-8 and lone surrogates get a 400 and are never forwarded;
// slow clients lose their connection; a long stream is not cut.
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  fuzzGuards,
  idleLoadReport,
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
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const received: string[] = [];
let backend: http.Server;
let router: ServiceProcess;

/** Ready and idle; answers inference 200 JSON, or 15 SSE events 100 ms apart when asked to stream. */
async function startBackend(): Promise<http.Server> {
  const server = http.createServer(async (req, res) => {
    if (req.url === '/health/ready') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ready":true}');
      return;
    }
    if (req.url === '/load') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ...idleLoadReport('m'), timestamp_ms: Date.now() }));
      return;
    }
    let body = '';
    for await (const chunk of req) body += chunk;
    received.push(body);
    if (!body.includes('"stream":true')) {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      return;
    }
    writeSlowTokenStream(res, 15, { finish_reason: 'length' });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server;
}

const post = (path: string, body: Buffer | string) => postBody(`${router.url}${path}`, body);

beforeAll(async () => {
  backend = await startBackend();
  router = await startServiceProcess('router', serviceEntry('@strata/router-service', import.meta.url), {
    env: {
      STRATA_BACKEND_URL: `http://127.0.0.1:${(backend.address() as AddressInfo).port}`,
      ...SLOW_CLIENT_TIMEOUT_ENV,
    },
  });
  // Served once the router has seen the backend ready.
  for (let i = 0; i < 100 && (await post('/v1/generate', '{"prompt":"x"}')).status !== 200; i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
}, 60_000);

afterAll(async () => {
  await router?.stop('SIGKILL');
  backend?.close();
});

describe('router: hostile JSON bodies', () => {
  it('answers 5,000 levels of nesting 400 STRATA_BODY_TOO_DEEP and does not forward it', async () => {
    received.length = 0;
    const res = await post(
      '/v1/chat/completions',
      `{"messages":[{"role":"user","content":"hi"}],"x":${nestedJson('mixed', 5000)}}`,
    );
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body).error.code).toBe('STRATA_BODY_TOO_DEEP');
    expect(JSON.parse(res.body).error.message).toContain('deeper than 128 levels');
    expect(received).toEqual([]);
  });

  it('fuzz: no 5xx, and nothing the guards refuse reaches the backend', async () => {
    received.length = 0;
    const endpoints = [
      {
        path: '/v1/chat/completions',
        base: { model: 'm', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4 },
        textPath: ['messages', 0, 'content'],
      },
      { path: '/v1/generate', base: { prompt: 'Once upon a time', max_tokens: 4 }, textPath: ['prompt'] },
    ];
    for (const { path, base, textPath } of endpoints) {
      const limits = { base, textPath, maxJsonDepth: 128, bodyLimit: 8 * 1024 * 1024 };
      const report = await fuzzGuards(`router ${path}`, limits, (body) => post(path, body));
      expect(report.problems).toEqual([]);
    }
    expect(received.length).toBeGreaterThan(100);
    expect(received.flatMap((body) => unguardedBodyProblems(body, 128))).toEqual([]);
    expect(router.child.exitCode).toBeNull();
  });
});

describe('router: slow clients', () => {
  it('closes a connection whose headers or body arrive a byte at a time (408)', async () => {
    const problems = await slowClientProblems({
      target: router.url,
      slowHeaders: 'POST /v1/generate HTTP/1.1\r\nHost: x\r\n',
      slowBody: { requestLine: 'POST /v1/generate HTTP/1.1', body: '{"prompt":"Once upon a time"}' },
    });
    expect(problems).toEqual([]);
  });

  it('does not cut a stream that lasts longer than the request timeout', async () => {
    const started = performance.now();
    const res = await post('/v1/generate', '{"prompt":"x","stream":true}');
    expect(performance.now() - started).toBeGreaterThan(1200);
    expect(tokenStreamProblems(res, 15)).toEqual([]);
  });
});
