// Hostile input at the observability sidecar (issue 23, items 3-5), through the guards of the
// service base. It has no route that takes a body, but Fastify reads and parses a JSON body
// before it answers 404 or 405, so the guards run there too. The real process for the timeouts.
import { createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import {
  fuzzBodies,
  hostileBodies,
  type ServiceProcess,
  serviceEntry,
  startServiceProcess,
  trickle,
} from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { configEnv, configSchema } from '../src/config.js';

const SLACK_MS = 400;

describe('observability: hostile input', () => {
  it('fuzz: no 5xx on POST /status or an unknown path, each guard answers its own code', async () => {
    const config = loadConfig({ schema: configSchema, envMap: configEnv, env: {} });
    const app = buildApp(
      {
        config,
        logger: createLogger({ service: 'observability', level: 'silent' }),
        metrics: createMetrics('observability', { defaultMetrics: false }),
        readiness: new Readiness(),
      },
      { poll: false },
    );
    try {
      const base = { prompt: 'Once upon a time', max_tokens: 4 };
      for (const url of ['/status', '/nowhere']) {
        const cases = hostileBodies({
          base,
          textPath: ['prompt'],
          maxJsonDepth: 128,
          bodyLimit: 1024 * 1024,
        });
        const report = await fuzzBodies(Buffer.from(JSON.stringify(base)), cases, async (body) => {
          const res = await app.inject({
            method: 'POST',
            url,
            headers: { 'content-type': 'application/json' },
            payload: body,
          });
          return { status: res.statusCode, body: res.body };
        });
        console.log(`observability POST ${url}: ${report.cases} cases`, report.answers);
        expect(report.failures).toEqual([]);
        expect(report.answers['400 STRATA_BODY_TOO_DEEP']).toBeGreaterThan(20);
        expect(report.answers['400 STRATA_INVALID_ENCODING']).toBeGreaterThan(20);
      }
      expect((await app.inject('/health/live')).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  describe('the sidecar process', () => {
    let sidecar: ServiceProcess;
    beforeAll(async () => {
      sidecar = await startServiceProcess(
        'observability',
        serviceEntry('@strata/observability', import.meta.url),
        {
          env: {
            STRATA_BACKEND_URL: 'http://127.0.0.1:9',
            STRATA_HTTP_HEADERS_TIMEOUT_MS: '300',
            STRATA_HTTP_REQUEST_TIMEOUT_MS: '600',
          },
        },
      );
    });
    afterAll(async () => {
      await sidecar?.stop('SIGKILL');
    });

    it('closes a connection whose headers or body arrive a byte at a time (408)', async () => {
      const port = Number(new URL(sidecar.url).port);
      const headers = await trickle(port, 'GET /status HTTP/1.1\r\nHost: x\r\n', {
        intervalMs: 50,
        giveUpMs: 5000,
      });
      expect(headers.closedAfterMs).toBeGreaterThanOrEqual(300 - 20);
      expect(headers.closedAfterMs).toBeLessThan(300 + SLACK_MS);
      expect(headers.received).toMatch(/^HTTP\/1\.1 408 /);
      const body = '{"prompt":"Once upon a time"}';
      const slow = await trickle(port, body, {
        prefix: `POST /status HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
        intervalMs: 50,
        giveUpMs: 5000,
      });
      expect(slow.closedAfterMs).toBeGreaterThanOrEqual(600 - 20);
      expect(slow.closedAfterMs).toBeLessThan(600 + SLACK_MS);
      expect(slow.received).toContain('"code":"STRATA_REQUEST_TIMEOUT"');
      expect(sidecar.child.exitCode).toBeNull();
    });
  });
});
