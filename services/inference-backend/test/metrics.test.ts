// Engine metrics (vllm:*), GET /load and the per-request log line, on a real backend with the
// real engine on tinystories-656k. Warmup is off, so every request counted is one sent here.
import { identityHeaders, testIdentityKey } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FINE_BUCKETS_SECONDS, VLLM_BUCKETS } from '../src/observability/engine-metrics.js';
import { json, readSse } from './support/backend.js';
import { optionalModel } from './support/models.js';
import {
  MODEL_LABELS,
  type ObservedBackend,
  sample,
  startObservedBackend,
  VLLM_SERIES,
} from './support/observed-backend.js';

const tiny = optionalModel('tinystories-656k');

const HISTOGRAMS = {
  'vllm:time_to_first_token_seconds': VLLM_BUCKETS.timeToFirstToken,
  'vllm:inter_token_latency_seconds': VLLM_BUCKETS.interTokenLatency,
  'vllm:e2e_request_latency_seconds': VLLM_BUCKETS.requestLatency,
  'vllm:request_queue_time_seconds': VLLM_BUCKETS.requestLatency,
  'vllm:request_prefill_time_seconds': VLLM_BUCKETS.requestLatency,
  'vllm:request_decode_time_seconds': VLLM_BUCKETS.requestLatency,
};
// Over 16 tokens (one KV block), so the repeat hits the prefix cache.
const LONG_PROMPT =
  'Once upon a time there was a little girl named Lily. She loved to play in the park with her friends every day.';

let backend: ObservedBackend;
const identityKey = testIdentityKey();

const load = async () => {
  const res = await fetch(`${backend.url}/load`);
  expect(res.status).toBe(200);
  return json(res);
};

describe.skipIf(!tiny.path)(`engine metrics, /load and request logs${tiny.skipped}`, () => {
  beforeAll(async () => {
    backend = await startObservedBackend({ STRATA_IDENTITY_KEYS: identityKey.env });
  });
  afterAll(async () => {
    await backend?.close();
  });

  it('before the model loads: /load answers 200 with ready false and zeros; vllm series read 0', async () => {
    const report = await load();
    expect(report).toEqual({
      model: 'tinystories-656k',
      ready: false,
      running: 0,
      waiting: 0,
      live_requests: 0,
      kv_usage: 0,
      kv_blocks_free: 0,
      kv_blocks_total: 0,
      timestamp_ms: expect.any(Number),
    });
    expect(Math.abs(report.timestamp_ms - Date.now())).toBeLessThan(5000);
    const samples = await backend.scrape();
    for (const name of VLLM_SERIES) expect(sample(samples, name, MODEL_LABELS), name).toBe(0);
  });

  it('counts real requests exactly, with vLLM names, labels and bucket edges', async () => {
    await backend.start();
    const idle = await load();
    expect(idle).toMatchObject({
      ready: true,
      running: 0,
      waiting: 0,
      live_requests: 0,
      kv_usage: 0,
      kv_blocks_total: 512,
      kv_blocks_free: 512,
    });

    const bodies = [
      { prompt: 'Once upon a time', max_tokens: 6 },
      { prompt: LONG_PROMPT, max_tokens: 4 },
      { prompt: LONG_PROMPT, max_tokens: 5 },
    ];
    const usages: { input_tokens: number; output_tokens: number }[] = [];
    for (const body of bodies) {
      const res = await fetch(`${backend.url}/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': `metrics-${usages.length}` },
        body: JSON.stringify({ ...body, temperature: 0, ignore_eos: true }),
      });
      expect(res.status).toBe(200);
      const out = await json(res);
      expect(out.finish_reason).toBe('length');
      usages.push(out.usage);
    }
    const streamed = await fetch(`${backend.url}/v1/generate`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...identityHeaders(identityKey, { tenant: 't1', requestId: 'metrics-stream' }),
      },
      body: JSON.stringify({
        prompt: 'The dog',
        max_tokens: 7,
        temperature: 0,
        ignore_eos: true,
        stream: true,
      }),
    });
    const events = await readSse(streamed);
    const done = events.at(-1) as { type: string; usage: { input_tokens: number; output_tokens: number } };
    expect(done.type).toBe('done');
    usages.push(done.usage);

    const tooLong = await fetch(`${backend.url}/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'word '.repeat(3000), max_tokens: 4 }),
    });
    expect(tooLong.status).toBe(400);
    const rejectedCode = (await json(tooLong)).error.code as string;

    const n = usages.length;
    const generated = usages.reduce((sum, u) => sum + u.output_tokens, 0);
    const prompted = usages.reduce((sum, u) => sum + u.input_tokens, 0);
    expect(generated).toBe(6 + 4 + 5 + 7);

    const samples = await backend.scrape();
    for (const name of VLLM_SERIES) {
      const found = samples.find((s) => s.name === name);
      expect(found?.labels.model_name, name).toBe('tinystories-656k');
    }
    expect(sample(samples, 'vllm:generation_tokens_total', MODEL_LABELS)).toBe(generated);
    expect(sample(samples, 'vllm:prompt_tokens_total', MODEL_LABELS)).toBe(prompted);
    expect(
      sample(samples, 'vllm:request_success_total', { ...MODEL_LABELS, finished_reason: 'length' }),
    ).toBe(n);
    expect(sample(samples, 'vllm:request_success_total', { ...MODEL_LABELS, finished_reason: 'stop' })).toBe(
      0,
    );
    expect(sample(samples, 'vllm:request_success_total', { ...MODEL_LABELS, finished_reason: 'abort' })).toBe(
      0,
    );
    for (const h of [
      'vllm:time_to_first_token_seconds',
      'vllm:e2e_request_latency_seconds',
      'vllm:request_queue_time_seconds',
      'vllm:request_prefill_time_seconds',
      'vllm:request_decode_time_seconds',
    ]) {
      expect(sample(samples, `${h}_count`, MODEL_LABELS), h).toBe(n);
      expect(sample(samples, `${h}_bucket`, { ...MODEL_LABELS, le: '+Inf' }), h).toBe(n);
      expect(sample(samples, `${h}_sum`, MODEL_LABELS), h).toBeGreaterThan(0);
    }
    expect(sample(samples, 'vllm:inter_token_latency_seconds_count', MODEL_LABELS)).toBe(generated - n);

    // Engine totals, read at scrape time, equal the engine's own.
    const stats = backend.host.loaded?.engine.stats();
    expect(stats?.prefixCacheHits).toBeGreaterThan(0);
    expect(sample(samples, 'vllm:prefix_cache_hits_total', MODEL_LABELS)).toBe(stats?.prefixCacheHits);
    expect(sample(samples, 'vllm:prefix_cache_queries_total', MODEL_LABELS)).toBe(stats?.prefixCacheQueries);
    expect(sample(samples, 'vllm:num_preemptions_total', MODEL_LABELS)).toBe(stats?.numPreemptions);
    expect(sample(samples, 'vllm:num_requests_running', MODEL_LABELS)).toBe(0);
    expect(sample(samples, 'vllm:num_requests_waiting', MODEL_LABELS)).toBe(0);
    expect(sample(samples, 'vllm:kv_cache_usage_perc', MODEL_LABELS)).toBe(0);
    expect(sample(samples, 'strata_backend_requests_rejected_total', { code: rejectedCode })).toBe(1);

    // Tokens per engine step. The requests ran one at a time: each is one prefill step over the
    // prompt tokens not found in the prefix cache, then one single-token step per further token.
    const hits = stats?.prefixCacheHits ?? 0;
    expect(sample(samples, 'vllm:iteration_tokens_total_count', MODEL_LABELS)).toBe(generated);
    expect(sample(samples, 'vllm:iteration_tokens_total_sum', MODEL_LABELS)).toBe(
      prompted - hits + generated - n,
    );
    // Single-token steps: every decode, plus the repeated long prompt's prefill when the cache
    // (all hits are that request's) left it one token to compute.
    const repeatPrefill = (usages[2]?.input_tokens ?? 0) - hits;
    expect(sample(samples, 'vllm:iteration_tokens_total_bucket', { ...MODEL_LABELS, le: '1' })).toBe(
      generated - n + (repeatPrefill === 1 ? 1 : 0),
    );
    const stepEdges = samples
      .filter((s) => s.name === 'vllm:iteration_tokens_total_bucket' && s.labels.le !== '+Inf')
      .map((s) => Number(s.labels.le));
    expect(stepEdges).toEqual(VLLM_BUCKETS.iterationTokens);

    // vLLM's edges, plus the finer ones below 10 ms, and nothing else.
    for (const [name, vllm] of Object.entries(HISTOGRAMS)) {
      const edges = samples
        .filter((s) => s.name === `${name}_bucket` && s.labels.le !== '+Inf')
        .map((s) => Number(s.labels.le));
      const expected = [...new Set([...FINE_BUCKETS_SECONDS, ...vllm])].sort((a, b) => a - b);
      expect(edges, name).toEqual(expected);
      expect(edges).toEqual(expect.arrayContaining([0.0001, 0.0005, 0.0025, 0.0075, ...vllm]));
    }

    // Counters never go down across scrapes, and a second scrape adds nothing when idle.
    const again = await backend.scrape();
    expect(sample(again, 'vllm:prefix_cache_hits_total', MODEL_LABELS)).toBe(stats?.prefixCacheHits);
    expect(sample(again, 'vllm:generation_tokens_total', MODEL_LABELS)).toBe(generated);

    // One log line per finished request, with its id, tenant, tokens, timings and finish.
    const lines = backend.logs.filter((l) => l.msg === 'request finished');
    expect(lines).toHaveLength(n);
    expect(lines.map((l) => l.request_id)).toEqual(['metrics-0', 'metrics-1', 'metrics-2', 'metrics-stream']);
    lines.forEach((line, i) => {
      expect(line.prompt_tokens).toBe(usages[i]?.input_tokens);
      expect(line.output_tokens).toBe(usages[i]?.output_tokens);
      expect(line.finish_reason).toBe('length');
      expect(line.ttft_ms).toBeGreaterThan(0);
      expect(line.e2e_ms as number).toBeGreaterThanOrEqual(line.ttft_ms as number);
      expect(line.queue_ms).toBeGreaterThanOrEqual(0);
      expect(line.prefill_ms).toBeGreaterThanOrEqual(0);
      expect(line.decode_ms).toBeGreaterThan(0);
      // Each value is rounded to 0.001 ms, so the two rounded parts may exceed the rounded whole
      // by up to 0.0015 ms (plus float representation error), never more.
      expect((line.queue_ms as number) + (line.prefill_ms as number)).toBeLessThanOrEqual(
        (line.ttft_ms as number) + 0.0015 + 1e-9,
      );
    });
    // Signed by the edge's key: its tenant; unsigned: the tenant of unverified callers.
    expect(lines[3]?.tenant).toBe('t1');
    expect(lines[0]?.tenant).toBe('unverified');

    const after = await load();
    expect(after).toMatchObject({ ready: true, running: 0, waiting: 0, live_requests: 0, kv_usage: 0 });
    expect(after.kv_blocks_free).toBe(512);
  });
});
