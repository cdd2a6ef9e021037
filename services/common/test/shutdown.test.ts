import { Agent, request } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { Readiness } from '../src/readiness.js';
import { createServiceApp } from '../src/service.js';
import { createShutdown, type ShutdownOptions } from '../src/shutdown.js';

const silent = () =>
  createLogger({
    service: 'test',
    destination: new Writable({
      write(_c, _e, done) {
        done();
      },
    }),
  });

// A fresh TCP connection per request (agent: false), so "refused" really means not accepting;
// or a keep-alive agent, which holds the connection open after the response.
function get(
  port: number,
  path: string,
  agent: Agent | false = false,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

async function slowServer() {
  const logger = silent();
  const readiness = new Readiness();
  const app = createServiceApp({
    name: 'test',
    logger,
    metrics: createMetrics('test', { defaultMetrics: false }),
    readiness,
  });
  let release: () => void = () => {};
  let entered: () => void = () => {};
  const inside = new Promise<void>((resolve) => {
    entered = resolve;
  });
  app.get('/slow', async () => {
    entered();
    await new Promise<void>((resolve) => {
      release = resolve;
    });
    return { done: true };
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  /** createShutdown for this server: a 10 s drain unless `options` say otherwise. */
  const shutdown = (options: Partial<Pick<ShutdownOptions, 'drainTimeoutMs' | 'cleanup'>> = {}) =>
    createShutdown({ app, readiness, logger, drainTimeoutMs: 10_000, ...options });
  return { app, logger, readiness, port, inside, release: () => release(), shutdown };
}

describe('graceful shutdown', () => {
  it('turns not-ready, refuses new connections and lets an in-flight request finish', async () => {
    const s = await slowServer();
    const inFlight = get(s.port, '/slow');
    await s.inside;
    let cleaned = false;
    const shutdown = s.shutdown({
      cleanup: async () => {
        cleaned = true;
      },
    });
    const done = shutdown('SIGTERM');
    expect(s.readiness.ready).toBe(false);
    expect(s.readiness.report().draining).toBe(true);
    await expect(get(s.port, '/health/live')).rejects.toThrow(/ECONNREFUSED/);
    expect(cleaned).toBe(false);
    s.release();
    await expect(inFlight).resolves.toEqual({ status: 200, body: '{"done":true}' });
    await expect(done).resolves.toBe('drained');
    expect(cleaned).toBe(true);
    // A second signal joins the first shutdown instead of starting another.
    await expect(shutdown('SIGINT')).resolves.toBe('drained');
  });

  it('cuts requests still running at the deadline', async () => {
    const s = await slowServer();
    const inFlight = get(s.port, '/slow');
    await s.inside;
    const started = Date.now();
    const outcome = await s.shutdown({ drainTimeoutMs: 300 })('SIGTERM');
    const elapsed = Date.now() - started;
    expect(outcome).toBe('deadline');
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(elapsed).toBeLessThan(5_000);
    await expect(inFlight).rejects.toThrow(/socket hang up|ECONNRESET/);
    s.release();
  });

  it('drains without waiting for connections that never sent a request', async () => {
    const s = await slowServer();
    // Connected ahead of need and silent: Node alone would count this as busy for a minute.
    const silentClient = await new Promise<Socket>((resolve) => {
      const socket = connect(s.port, '127.0.0.1', () => resolve(socket));
    });
    const clientClosed = new Promise<void>((resolve) => silentClient.once('close', () => resolve()));
    const inFlight = get(s.port, '/slow');
    await s.inside;
    const done = s.shutdown()('SIGTERM');
    await clientClosed; // cut after the grace period
    s.release(); // the request in flight is not cut: it finishes
    await expect(inFlight).resolves.toEqual({ status: 200, body: '{"done":true}' });
    await expect(done).resolves.toBe('drained');
  });

  it('closes a keep-alive connection as soon as its response ends', async () => {
    const s = await slowServer();
    // The client would keep the connection for a minute; the server must not wait for it.
    const agent = new Agent({ keepAlive: true, keepAliveMsecs: 60_000 });
    const inFlight = get(s.port, '/slow', agent);
    await s.inside;
    const done = s.shutdown()('SIGTERM');
    await new Promise((r) => setTimeout(r, 200));
    const released = performance.now();
    s.release();
    await expect(inFlight).resolves.toEqual({ status: 200, body: '{"done":true}' });
    await expect(done).resolves.toBe('drained');
    expect(performance.now() - released).toBeLessThan(2_000);
    agent.destroy();
  });
});
