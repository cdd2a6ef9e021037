import { describe, expect, it } from 'vitest';
import { createMetrics } from '../src/metrics.js';

describe('metrics registry', () => {
  it('labels every series with the service and exposes Prometheus text', async () => {
    const metrics = createMetrics('edge-gateway');
    metrics.httpRequests.inc({ method: 'GET', route: '/v1/models', status: '200' });
    metrics.httpDuration.observe({ method: 'GET', route: '/v1/models', status: '200' }, 0.0007);
    const text = await metrics.registry.metrics();
    expect(text).toContain(
      'strata_http_requests_total{method="GET",route="/v1/models",status="200",service="edge-gateway"} 1',
    );
    // Finer buckets than the default below 10 ms: 0.7 ms lands in the 1 ms bucket, not the 0.5 ms one.
    expect(text).toContain(
      'strata_http_request_duration_seconds_bucket{le="0.0005",service="edge-gateway",method="GET",route="/v1/models",status="200"} 0',
    );
    expect(text).toContain(
      'strata_http_request_duration_seconds_bucket{le="0.001",service="edge-gateway",method="GET",route="/v1/models",status="200"} 1',
    );
    expect(text).toMatch(/^process_cpu_user_seconds_total\{service="edge-gateway"\} /m);
  });

  it('keeps registries of two services apart', async () => {
    const a = createMetrics('a', { defaultMetrics: false });
    const b = createMetrics('b', { defaultMetrics: false });
    a.httpRequests.inc({ method: 'GET', route: '/x', status: '200' });
    expect(await b.registry.metrics()).not.toContain('route="/x"');
  });
});
