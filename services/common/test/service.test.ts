import { type AddressInfo, connect } from 'node:net';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { StrataError } from '../src/errors.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { createServiceApp } from '../src/service.js';

function build() {
  const lines: string[] = [];
  const logger = createLogger({
    service: 'test-service',
    destination: new Writable({
      write(chunk, _e, done) {
        lines.push(String(chunk));
        done();
      },
    }),
  });
  const app = createServiceApp({
    name: 'test-service',
    logger,
    metrics: createMetrics('test-service', { defaultMetrics: false }),
    bodyLimit: 64,
  });
  app.post('/echo', async (request) => request.body);
  app.get('/boom', async () => {
    throw new Error('database password is hunter2');
  });
  app.get('/busy', async () => {
    throw new StrataError('STRATA_QUEUE_FULL', 'queue holds 10 requests; retry later');
  });
  app.get(
    '/typed',
    { schema: { querystring: { type: 'object', properties: { n: { type: 'integer' } } } } },
    async () => ({}),
  );
  return { app, lines };
}

describe('service base', () => {
  it('answers liveness and readiness, with the failing check named', async () => {
    const { app } = build();
    expect((await app.inject('/health/live')).json()).toEqual({ status: 'ok' });
    let res = await app.inject('/health/ready');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ready: true, draining: false, checks: {} });
    app.readiness.set('model_loaded', false, 'loading weights');
    res = await app.inject('/health/ready');
    expect(res.statusCode).toBe(503);
    expect(res.json()).toEqual({
      ready: false,
      draining: false,
      checks: { model_loaded: { ok: false, detail: 'loading weights' } },
    });
  });

  it('serves Prometheus text that counts requests by route template', async () => {
    const { app } = build();
    await app.inject('/health/live');
    await app.inject('/nope');
    const res = await app.inject('/metrics');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(res.body).toContain(
      'strata_http_requests_total{method="GET",route="/health/live",status="200",service="test-service"} 1',
    );
    expect(res.body).toContain(
      'strata_http_requests_total{method="GET",route="unmatched",status="404",service="test-service"} 1',
    );
  });

  it('tells onDraining listeners once, at once when already draining', () => {
    const { app } = build();
    const told: string[] = [];
    app.readiness.onDraining(() => told.push('early'));
    app.readiness.startDraining();
    app.readiness.startDraining();
    app.readiness.onDraining(() => told.push('late'));
    expect(told).toEqual(['early', 'late']);
    expect(app.readiness.ready).toBe(false);
  });

  it('answers /metrics with the exposition when one is set (the registries of several threads)', async () => {
    const { app } = build();
    app.metrics.exposition = async () => 'strata_summed_total 3\n';
    const res = await app.inject('/metrics');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('strata_summed_total 3\n');
  });

  it('echoes a client request id and makes one when absent', async () => {
    const { app } = build();
    expect(
      (await app.inject({ url: '/health/live', headers: { 'x-request-id': 'req-42' } })).headers[
        'x-request-id'
      ],
    ).toBe('req-42');
    expect((await app.inject('/health/live')).headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('maps every kind of bad request to a catalogue error', async () => {
    const { app } = build();
    const cases = [
      [{ method: 'GET', url: '/missing' }, 404, 'STRATA_NOT_FOUND'],
      [{ method: 'GET', url: '/echo?x=1' }, 405, 'STRATA_METHOD_NOT_ALLOWED'],
      [{ method: 'DELETE', url: '/health/live' }, 405, 'STRATA_METHOD_NOT_ALLOWED'],
      [
        { method: 'POST', url: '/echo', payload: '{"a":', headers: { 'content-type': 'application/json' } },
        400,
        'STRATA_INVALID_JSON',
      ],
      [
        {
          method: 'POST',
          url: '/echo',
          payload: JSON.stringify({ a: 'x'.repeat(100) }),
          headers: { 'content-type': 'application/json' },
        },
        413,
        'STRATA_BODY_TOO_LARGE',
      ],
      [
        {
          method: 'POST',
          url: '/echo',
          payload: 'hi',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
        },
        415,
        'STRATA_UNSUPPORTED_MEDIA_TYPE',
      ],
      [{ method: 'GET', url: '/typed?n=abc' }, 400, 'STRATA_INVALID_REQUEST'],
      [{ method: 'GET', url: '/busy' }, 429, 'STRATA_QUEUE_FULL'],
    ] as const;
    for (const [req, status, code] of cases) {
      const res = await app.inject(req);
      expect([req.url, res.statusCode]).toEqual([req.url, status]);
      expect(res.json().error.code).toBe(code);
      expect(res.json().error.message.length).toBeGreaterThan(0);
    }
    const busy = await app.inject('/busy');
    expect(busy.json().error.message).toBe('queue holds 10 requests; retry later');
    expect(busy.headers['retry-after']).toBe('1');
    expect((await app.inject('/missing')).headers['retry-after']).toBeUndefined();
    const wrongMethod = await app.inject({ method: 'DELETE', url: '/health/live' });
    expect(wrongMethod.headers.allow).toBe('GET, HEAD');
    expect(wrongMethod.json().error.message).toBe('DELETE is not allowed on /health/live; use GET, HEAD.');
    expect((await app.inject({ method: 'HEAD', url: '/health/live' })).statusCode).toBe(200);
    expect((await app.inject('/typed?n=abc')).json().error.message).toContain(
      'Invalid request: querystring.n: must be integer',
    );
  });

  it('answers an oversized body with 413 and keeps the connection, reading what the client still sends', async () => {
    const { app } = build();
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const { port } = app.server.address() as AddressInfo;
      const socket = connect(port, '127.0.0.1');
      let received = '';
      socket.setEncoding('utf8').on('data', (chunk) => {
        received += chunk;
      });
      const until = async (check: () => boolean) => {
        for (let i = 0; i < 200 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
        expect(check()).toBe(true);
      };
      const size = 200_000;
      socket.write(
        `POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${size}\r\n\r\n`,
      );
      await until(() => received.includes('STRATA_BODY_TOO_LARGE'));
      expect(received).toMatch(/^HTTP\/1\.1 413 /);
      expect(received.toLowerCase()).not.toContain('connection: close');
      // The rest of the upload is still read (no EPIPE or reset), then the connection serves on.
      for (let sent = 0; sent < size; sent += 10_000) socket.write('x'.repeat(10_000));
      received = '';
      socket.write('GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n');
      await until(() => received.includes('{"status":"ok"}'));
      expect(received).toMatch(/^HTTP\/1\.1 200 /);
      socket.destroy();

      // A declared body beyond what is worth reading still gets the 413, then the close.
      const big = connect(port, '127.0.0.1');
      let bigReceived = '';
      big.setEncoding('utf8').on('data', (chunk) => {
        bigReceived += chunk;
      });
      const ended = new Promise((resolve) => big.once('end', resolve));
      big.write(
        `POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${100 * 1024 * 1024}\r\n\r\n`,
      );
      await ended;
      expect(bigReceived).toMatch(/^HTTP\/1\.1 413 /);
      expect(bigReceived.toLowerCase()).toContain('connection: close');
      big.destroy();
    } finally {
      await app.close();
    }
  });

  it('hides internal failures from the client but logs them with the request id', async () => {
    const { app, lines } = build();
    const res = await app.inject({ url: '/boom', headers: { 'x-request-id': 'r-boom' } });
    expect(res.statusCode).toBe(500);
    expect(res.json()).toEqual({
      error: { code: 'STRATA_INTERNAL', message: 'Internal error.', type: 'internal' },
    });
    const logged = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'request failed');
    expect(logged).toMatchObject({ request_id: 'r-boom', level: 'error', service: 'test-service' });
    expect(logged.err.message).toBe('database password is hunter2');
  });

  it('binds the trace id of an incoming traceparent to request logs', async () => {
    const { app, lines } = build();
    await app.inject({
      url: '/busy',
      headers: {
        traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
        'x-request-id': 'r-t',
      },
    });
    const logged = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'request rejected');
    expect(logged).toMatchObject({ request_id: 'r-t', trace_id: '4bf92f3577b34da6a3ce929d0e0e4736' });
  });

  it('logs the trace id it starts for a request without one, the one it forwards', async () => {
    const lines: string[] = [];
    const app = createServiceApp({
      name: 'edge-gateway',
      logger: createLogger({
        service: 'edge-gateway',
        destination: new Writable({
          write(chunk, _e, done) {
            lines.push(String(chunk));
            done();
          },
        }),
      }),
      metrics: createMetrics('edge-gateway', { defaultMetrics: false }),
      traceRequests: 'originate',
    });
    app.post('/v1/generate', async (request) => {
      request.log.info('forwarding');
      return { forwarded: request.headers.traceparent };
    });
    const ids = new Set<string>();
    for (const traceparent of [undefined, 'not-a-traceparent']) {
      const res = await app.inject({
        method: 'POST',
        url: '/v1/generate',
        headers: traceparent ? { traceparent } : {},
        payload: {},
      });
      const forwarded = (res.json() as { forwarded: string }).forwarded;
      expect(forwarded).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      const traceId = forwarded.split('-')[1] as string;
      const logged = lines
        .map((l) => JSON.parse(l))
        .filter((l) => l.request_id === res.headers['x-request-id']);
      expect(logged.map((l) => l.msg)).toEqual(['forwarding', 'request completed']);
      for (const line of logged) expect(line.trace_id).toBe(traceId);
      ids.add(traceId);
    }
    expect(ids.size).toBe(2); // a new trace each time
    await app.close();
  });
});
