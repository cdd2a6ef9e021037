// /metrics on a port of its own (STRATA_METRICS_PORT): the edge's metrics name tenants, so the
// chart opens that port to Prometheus alone. Real servers on port 0.
import { describe, expect, it } from 'vitest';
import { baseServiceEnv, baseServiceSchema, loadConfig } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { createServiceApp, serveMetricsOnOwnPort } from '../src/service.js';

describe('serveMetricsOnOwnPort', () => {
  it('serves /metrics only on its own port; the API port answers 404 for it', async () => {
    const metrics = createMetrics('test-service', { defaultMetrics: false });
    const app = createServiceApp({
      name: 'test-service',
      logger: createLogger({ service: 'test-service', level: 'silent' }),
      metrics,
    });
    app.get('/ping', async () => ({ ok: true }));
    const metricsUrl = await serveMetricsOnOwnPort(app, '127.0.0.1', 0);
    const apiUrl = await app.listen({ host: '127.0.0.1', port: 0 });
    expect(metricsUrl).not.toBe(apiUrl);
    try {
      expect((await fetch(`${apiUrl}/ping`)).status).toBe(200);
      const onApi = await fetch(`${apiUrl}/metrics`);
      expect(onApi.status).toBe(404);
      expect(((await onApi.json()) as { error: { code: string } }).error.code).toBe('STRATA_NOT_FOUND');

      const scrape = await fetch(`${metricsUrl}/metrics`);
      expect(scrape.status).toBe(200);
      expect(scrape.headers.get('content-type')).toMatch(/^text\/plain/);
      // The API app's own registry: its request counter saw /ping.
      expect(await scrape.text()).toMatch(/route="\/ping"/);

      const other = await fetch(`${metricsUrl}/ping`);
      expect(other.status).toBe(404);
      expect(((await other.json()) as { error: { message: string } }).error.message).toContain(
        'serves GET /metrics only',
      );
    } finally {
      await app.close();
    }
    // Closing the service closes its metrics port too.
    await expect(fetch(`${metricsUrl}/metrics`)).rejects.toThrow();
  });

  it('is off unless STRATA_METRICS_PORT is set', () => {
    const off = loadConfig({ schema: baseServiceSchema, envMap: baseServiceEnv, env: {} });
    expect(off.metricsPort).toBeUndefined();
    const on = loadConfig({
      schema: baseServiceSchema,
      envMap: baseServiceEnv,
      env: { STRATA_METRICS_PORT: '9091' },
    });
    expect(on.metricsPort).toBe(9091);
    expect(() =>
      loadConfig({
        schema: baseServiceSchema,
        envMap: baseServiceEnv,
        env: { STRATA_METRICS_PORT: '70000' },
      }),
    ).toThrow(/STRATA_METRICS_PORT/);
  });
});
