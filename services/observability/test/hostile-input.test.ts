// Hostile input at the observability sidecar (issue 23, items 3-5), through the guards of the
// service base. It has no route that takes a body, but Fastify reads and parses a JSON body
// before it answers 404 or 405, so the guards run there too. The real process for the timeouts.
import { createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import {
  fuzzGuards,
  type ServiceProcess,
  SLOW_CLIENT_TIMEOUT_ENV,
  serviceEntry,
  slowClientProblems,
  startServiceProcess,
} from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { configEnv, configSchema } from '../src/config.js';

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
        const limits = { base, textPath: ['prompt'], maxJsonDepth: 128, bodyLimit: 1024 * 1024 };
        const report = await fuzzGuards(`observability POST ${url}`, limits, async (body) => {
          const headers = { 'content-type': 'application/json' };
          const res = await app.inject({ method: 'POST', url, headers, payload: body });
          return { status: res.statusCode, body: res.body };
        });
        expect(report.problems).toEqual([]);
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
            ...SLOW_CLIENT_TIMEOUT_ENV,
          },
        },
      );
    });
    afterAll(async () => {
      await sidecar?.stop('SIGKILL');
    });

    it('closes a connection whose headers or body arrive a byte at a time (408)', async () => {
      const problems = await slowClientProblems({
        target: sidecar.url,
        slowHeaders: 'GET /status HTTP/1.1\r\nHost: x\r\n',
        slowBody: { requestLine: 'POST /status HTTP/1.1', body: '{"prompt":"Once upon a time"}' },
      });
      expect(problems).toEqual([]);
      expect(sidecar.child.exitCode).toBeNull();
    });
  });
});
