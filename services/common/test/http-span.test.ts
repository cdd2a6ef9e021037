// The forwarding hops' SERVER span: exported over OTLP/HTTP to a real receiver, child of the
// caller's traceparent, and the traceparent the service passes on names that span.
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { createServiceApp } from '../src/service.js';
import { startTelemetry, type Telemetry } from '../src/telemetry.js';
import { type OtlpReceiver, startOtlpReceiver } from '../src/testing/otlp.js';

let receiver: OtlpReceiver;
let telemetry: Telemetry;

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  telemetry = startTelemetry({ serviceName: 'edge-gateway', endpoint: receiver.url });
});
afterAll(async () => {
  await receiver.close();
});

const logLines: Array<Record<string, unknown>> = [];

function app(mode: 'continue' | 'originate') {
  const server = createServiceApp({
    name: 'edge-gateway',
    logger: createLogger({
      service: 'edge-gateway',
      destination: new Writable({
        write(chunk, _e, done) {
          logLines.push(JSON.parse(String(chunk)));
          done();
        },
      }),
    }),
    metrics: createMetrics('edge-gateway', { defaultMetrics: false }),
    traceRequests: mode,
  });
  // What a forwarding route would send on.
  server.post('/v1/generate', async (request) => ({ forwarded: request.headers.traceparent }));
  return server;
}

describe('request spans', () => {
  it('makes each request a SERVER span, child of the caller, and forwards its context', async () => {
    const traceId = randomBytes(16).toString('hex');
    const parentId = randomBytes(8).toString('hex');
    const continuing = app('continue');
    const res = await continuing.inject({
      method: 'POST',
      url: '/v1/generate',
      headers: { traceparent: `00-${traceId}-${parentId}-01`, 'x-request-id': 'span-1' },
      payload: {},
    });
    const forwarded = (res.json() as { forwarded: string }).forwarded;
    expect(forwarded).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    const spanId = forwarded.split('-')[2];
    expect(spanId).not.toBe(parentId);

    const originating = app('originate');
    const freshRes = await originating.inject({ method: 'POST', url: '/v1/generate', payload: {} });
    const fresh = (freshRes.json() as { forwarded: string }).forwarded;
    expect(fresh).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    // The logs of both carry the trace they forward: the caller's, and the one the span started.
    const completed = (requestId: unknown) =>
      logLines.find((l) => l.request_id === requestId && l.msg === 'request completed');
    expect(completed('span-1')?.trace_id).toBe(traceId);
    expect(completed(freshRes.headers['x-request-id'])?.trace_id).toBe(fresh.split('-')[1]);

    await telemetry.shutdown(); // flushes the batch
    const spans = receiver.spans();
    const child = spans.find((s) => s.traceId === traceId);
    expect(child).toMatchObject({ name: 'POST /v1/generate', kind: 2, spanId, parentSpanId: parentId });
    expect(child?.attributes.find((a) => a.key === 'strata.request_id')?.value).toEqual({
      stringValue: 'span-1',
    });
    expect(child?.attributes.find((a) => a.key === 'http.response.status_code')?.value).toEqual({
      intValue: 200,
    });
    const root = spans.find((s) => s.traceId === fresh.split('-')[1]);
    expect(root?.spanId).toBe(fresh.split('-')[2]);
    expect(root?.parentSpanId ?? '').toBe('');
  });
});
