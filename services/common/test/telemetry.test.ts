import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { startTelemetry } from '../src/telemetry.js';

describe('telemetry', () => {
  it('is a no-op without an endpoint: spans are not recording and nothing is exported', async () => {
    const telemetry = startTelemetry({ serviceName: 'edge-gateway' });
    expect(telemetry.enabled).toBe(false);
    const span = telemetry.tracer.startSpan('noop');
    expect(span.isRecording()).toBe(false);
    span.end();
    await telemetry.shutdown();
  });

  it('exports spans over OTLP/HTTP to the configured endpoint', async () => {
    const received: { url: string | undefined; contentType: string | undefined; bytes: number }[] = [];
    const collector = createServer((req: IncomingMessage, res) => {
      let bytes = 0;
      req.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
      });
      req.on('end', () => {
        received.push({ url: req.url, contentType: req.headers['content-type'], bytes });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
    const { port } = collector.address() as AddressInfo;
    try {
      const telemetry = startTelemetry({
        serviceName: 'router-service',
        endpoint: `http://127.0.0.1:${port}/`,
      });
      expect(telemetry.enabled).toBe(true);
      const span = telemetry.tracer.startSpan('route');
      expect(span.isRecording()).toBe(true);
      span.setAttribute('strata.backend', 'b1');
      span.end();
      await telemetry.shutdown();
      expect(received.length).toBeGreaterThanOrEqual(1);
      expect(received[0]?.url).toBe('/v1/traces');
      expect(received[0]?.bytes).toBeGreaterThan(0);
    } finally {
      collector.close();
    }
  });
});
