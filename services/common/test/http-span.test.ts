// The forwarding hops' SERVER span: exported over OTLP/HTTP to a real receiver, child of the
// caller's traceparent, and the traceparent the service passes on names that span.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { createServiceApp } from '../src/service.js';
import { startTelemetry, type Telemetry } from '../src/telemetry.js';

interface OtlpSpan {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes: { key: string; value: Record<string, unknown> }[];
}

const bodies: string[] = [];
const collector = createServer((req: IncomingMessage, res) => {
  let body = '';
  req.on('data', (chunk: Buffer) => {
    body += chunk.toString('utf8');
  });
  req.on('end', () => {
    if (req.url === '/v1/traces') bodies.push(body);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
let telemetry: Telemetry;

beforeAll(async () => {
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  const { port } = collector.address() as AddressInfo;
  telemetry = startTelemetry({ serviceName: 'edge-gateway', endpoint: `http://127.0.0.1:${port}` });
});
afterAll(() => {
  collector.close();
});

function app(mode: 'continue' | 'originate') {
  const server = createServiceApp({
    name: 'edge-gateway',
    logger: createLogger({ service: 'edge-gateway', level: 'silent' }),
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
    const fresh = (
      (await originating.inject({ method: 'POST', url: '/v1/generate', payload: {} })).json() as {
        forwarded: string;
      }
    ).forwarded;
    expect(fresh).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);

    await telemetry.shutdown(); // flushes the batch
    const spans: OtlpSpan[] = bodies.flatMap((b) =>
      (JSON.parse(b) as { resourceSpans: { scopeSpans: { spans: OtlpSpan[] }[] }[] }).resourceSpans.flatMap(
        (r) => r.scopeSpans.flatMap((s) => s.spans),
      ),
    );
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
