// Fail closed: with Redis unreachable an edge configured so refuses with 503 and says why.
import { freePort } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEdge, type TestEdge } from './support/edge.js';
import { RecordingUpstream } from './support/upstream.js';

let upstream: RecordingUpstream;
let edge: TestEdge;
beforeAll(async () => {
  upstream = await RecordingUpstream.start();
  edge = await startEdge({
    STRATA_ROUTER_URL: upstream.url,
    REDIS_URL: `redis://127.0.0.1:${await freePort()}`, // nothing listens there
    STRATA_EDGE_QUOTA_FAIL_MODE: 'closed',
  });
});
afterAll(async () => {
  await edge?.close();
  await upstream?.close();
});

describe('quota store down, failing closed', () => {
  it('answers 503 STRATA_QUOTA_UNAVAILABLE with Retry-After and forwards nothing', async () => {
    const res = await fetch(`${edge.url}/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"prompt":"x"}',
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(await res.json()).toEqual({
      error: {
        code: 'STRATA_QUOTA_UNAVAILABLE',
        message: 'Quotas cannot be checked now; retry later.',
        type: 'overloaded',
      },
    });
    expect(upstream.received).toEqual([]);
    expect(await edge.metric('strata_edge_quota_store_up')).toBe(0);
    expect(await edge.metric('strata_edge_rejections_total', { reason: 'quota_store' })).toBe(1);
  });
});
