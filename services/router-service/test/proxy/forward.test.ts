// forward() against real HTTP upstreams on port 0 that stream, fail, or die.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLogger, createMetrics, createServiceApp } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Candidate, type ForwardResult, forward } from '../../src/proxy/forward.js';
import { abortOnClientClose } from '../../src/router/attempts.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
const servers: Server[] = [];

async function upstream(handler: Handler): Promise<string> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A port nothing listens on: connections are refused. */
async function deadUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

const sse =
  (events: string[], delayMs = 0, dieAfter?: number): Handler =>
  (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    let i = 0;
    const next = () => {
      if (dieAfter !== undefined && i === dieAfter) return res.socket?.destroy();
      if (i === events.length) return res.end();
      res.write(`data: ${events[i++]}\n\n`);
      setTimeout(next, delayMs);
    };
    next();
  };

let app: FastifyInstance;
let url: string;
let candidates: Candidate[] = [];
let lastResult: ForwardResult | undefined;
let failures: string[] = [];

beforeAll(async () => {
  app = createServiceApp({
    name: 'router-test',
    logger: createLogger({ service: 'router-test', level: 'silent' }),
    metrics: createMetrics('router-test', { defaultMetrics: false }),
  });
  app.post('/v1/generate', async (request, reply) => {
    failures = [];
    lastResult = await forward(
      {
        method: 'POST',
        path: '/v1/generate',
        headers: { 'content-type': 'application/json', 'x-request-id': request.id },
        body: JSON.stringify(request.body),
        signal: abortOnClientClose(reply),
        route: 'default',
      },
      candidates,
      { attempts: 3, deadlineMs: 5_000 },
      reply,
      (b) => failures.push(b),
      () => {},
    );
    return reply;
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  // The disconnect test leaves sockets behind on purpose; teardown does not wait for them.
  app.server.closeAllConnections();
  await app.close();
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
});

const post = (body: unknown = { prompt: 'hi' }, signal?: AbortSignal) =>
  fetch(`${url}/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });

describe('forward', () => {
  it('streams SSE through and names the backend and route', async () => {
    candidates = [{ name: 'b1', url: await upstream(sse(['{"type":"token"}', '{"type":"done"}'], 5)) }];
    const res = await post();
    expect(res.status).toBe(200);
    expect(res.headers.get('x-strata-backend')).toBe('b1');
    expect(res.headers.get('x-strata-route')).toBe('default');
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(await res.text()).toBe('data: {"type":"token"}\n\ndata: {"type":"done"}\n\n');
    expect(lastResult?.attempts.map((a) => a.outcome)).toEqual(['ok']);
  });

  it('moves on past a refused connection and a 500 before the first byte', async () => {
    const ok = await upstream(sse(['{"type":"done"}']));
    const broken = await upstream((_req, res) => res.writeHead(500).end('boom'));
    candidates = [
      { name: 'dead', url: await deadUrl() },
      { name: 'broken', url: broken },
      { name: 'ok', url: ok },
    ];
    const res = await post();
    expect(res.status).toBe(200);
    expect(res.headers.get('x-strata-backend')).toBe('ok');
    expect(await res.text()).toBe('data: {"type":"done"}\n\n');
    expect(lastResult?.attempts.map((a) => [a.backend, a.outcome])).toEqual([
      ['dead', 'connect_error'],
      ['broken', 'upstream_5xx'],
      ['ok', 'ok'],
    ]);
    expect(failures).toEqual(['dead', 'broken']);
  });

  it('retries a backend that dies before its first body byte', async () => {
    const dies = await upstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      setTimeout(() => res.socket?.destroy(), 10);
    });
    candidates = [
      { name: 'dies', url: dies },
      { name: 'ok', url: await upstream(sse(['{"type":"done"}'])) },
    ];
    const res = await post();
    expect(res.headers.get('x-strata-backend')).toBe('ok');
    expect(await res.text()).toBe('data: {"type":"done"}\n\n'); // the relay has finished
    // Headers may or may not have reached the proxy before the socket died: either way it is
    // a failure before the first byte, and the next candidate serves.
    expect(lastResult?.attempts.map((a) => [a.backend, a.outcome])).toEqual([
      ['dies', expect.stringMatching(/^(body_error|connect_error)$/)],
      ['ok', 'ok'],
    ]);
  });

  it('never retries a 4xx: the client gets it as it is', async () => {
    const bad = await upstream((_req, res) => {
      res
        .writeHead(400, { 'content-type': 'application/json' })
        .end('{"error":{"code":"STRATA_INVALID_REQUEST"}}');
    });
    candidates = [
      { name: 'bad', url: bad },
      { name: 'ok', url: await upstream(sse(['{"type":"done"}'])) },
    ];
    const res = await post();
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: { code: 'STRATA_INVALID_REQUEST' } });
    expect(lastResult?.attempts.map((a) => a.outcome)).toEqual(['client_error']);
  });

  it('ends an SSE stream with a clean error event when the backend dies after the first byte', async () => {
    candidates = [
      {
        name: 'flaky',
        url: await upstream(sse(['{"type":"token","index":0}', '{"type":"token","index":1}', 'x'], 5, 2)),
      },
      { name: 'ok', url: await upstream(sse(['{"type":"done"}'])) },
    ];
    const res = await post();
    const text = await res.text();
    expect(res.headers.get('x-strata-backend')).toBe('flaky');
    const events = text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => JSON.parse(e.slice(6)));
    expect(events.slice(0, 2)).toEqual([
      { type: 'token', index: 0 },
      { type: 'token', index: 1 },
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'error', error: { code: 'STRATA_UPSTREAM_ERROR' } });
    expect(lastResult?.failedAfterFirstByte).toBe(true);
  });

  it('answers 502 when every candidate fails and 503 when there is none', async () => {
    candidates = [
      { name: 'dead1', url: await deadUrl() },
      { name: 'dead2', url: await deadUrl() },
    ];
    const all = await post();
    expect(all.status).toBe(502);
    expect(((await all.json()) as { error: { code: string } }).error.code).toBe('STRATA_UPSTREAM_ERROR');
    candidates = [];
    const none = await post();
    expect(none.status).toBe(503);
    expect(((await none.json()) as { error: { code: string } }).error.code).toBe('STRATA_NO_BACKEND');
  });

  it('stays within the attempt budget', async () => {
    candidates = await Promise.all(
      [1, 2, 3, 4, 5].map(async (i) => ({ name: `dead${i}`, url: await deadUrl() })),
    );
    const res = await post();
    expect(res.status).toBe(502);
    const body = (await res.json()) as {
      error: { message: string; details: { attempts: { backend: string }[] } };
    };
    expect(body.error.details.attempts.map((a) => a.backend)).toEqual(['dead1', 'dead2', 'dead3']);
    expect(body.error.message).toBe(
      'every candidate failed (dead1: connect_error, dead2: connect_error, dead3: connect_error)',
    );
  });

  it('aborts the upstream request when the client disconnects', async () => {
    let upstreamClosed: () => void = () => {};
    const closed = new Promise<void>((resolve) => {
      upstreamClosed = resolve;
    });
    candidates = [
      {
        name: 'slow',
        url: await upstream((req, res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: {"type":"token"}\n\n');
          const timer = setInterval(() => res.write('data: {"type":"token"}\n\n'), 20);
          req.socket.on('close', () => {
            clearInterval(timer);
            upstreamClosed();
          });
        }),
      },
    ];
    const controller = new AbortController();
    const res = await post({ prompt: 'x' }, controller.signal);
    await res.body?.getReader().read();
    controller.abort();
    await expect(closed).resolves.toBeUndefined();
  });
});
