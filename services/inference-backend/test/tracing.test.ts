// A span per request, exported over OTLP/HTTP to a real receiver (@strata/common/testing), child
// of the traceparent the request came with, carrying the engine's moments as events.
import { randomBytes } from 'node:crypto';
import { startTelemetry } from '@strata/common';
import { startOtlpReceiver } from '@strata/common/testing';
import { describe, expect, it } from 'vitest';
import { json } from './support/backend.js';
import { optionalModel } from './support/models.js';
import { startObservedBackend } from './support/observed-backend.js';

const tiny = optionalModel('tinystories-656k');

describe.skipIf(!tiny.path)(`tracing${tiny.skipped}`, () => {
  it('exports a span per request, child of the incoming traceparent, with queue/first token events', async () => {
    const receiver = await startOtlpReceiver();
    const telemetry = startTelemetry({ serviceName: 'inference-backend', endpoint: receiver.url });
    const backend = await startObservedBackend();
    try {
      await backend.start();
      const traceId = randomBytes(16).toString('hex');
      const parentId = randomBytes(8).toString('hex');
      const res = await fetch(`${backend.url}/v1/generate`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          traceparent: `00-${traceId}-${parentId}-01`,
          'x-request-id': 'traced-1',
        },
        body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 3, temperature: 0, ignore_eos: true }),
      });
      expect(res.status).toBe(200);
      const out = await json(res);
      await telemetry.shutdown(); // flushes the batch

      const spans = receiver.spans();
      const span = spans.find((s) => s.name === 'inference.request');
      expect(span).toBeDefined();
      expect(span?.traceId).toBe(traceId);
      expect(span?.parentSpanId).toBe(parentId);
      expect(span?.events.map((e) => e.name)).toEqual(['queued', 'scheduled', 'first_token', 'finished']);
      const attr = (key: string) => span?.attributes.find((a) => a.key === key)?.value;
      expect(attr('gen_ai.request.model')).toEqual({ stringValue: 'tinystories-656k' });
      expect(attr('strata.request_id')).toEqual({ stringValue: 'traced-1' });
      expect(Number(attr('gen_ai.usage.output_tokens')?.intValue)).toBe(out.usage.output_tokens);
      expect(Number(attr('gen_ai.usage.input_tokens')?.intValue)).toBe(out.usage.input_tokens);
      expect(attr('gen_ai.response.finish_reasons')).toEqual({
        arrayValue: { values: [{ stringValue: 'length' }] },
      });
    } finally {
      await backend.close();
      await receiver.close();
    }
  });
});
