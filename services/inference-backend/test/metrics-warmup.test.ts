// The start-up warmup is not client traffic: after it, every vllm:* request series still reads 0
// and the engine totals start from the warmup's end; strata_backend_warmup_* counts it instead.
// A real backend with the real engine on tinystories-656k, warmup on.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json } from './support/backend.js';
import { optionalModel } from './support/models.js';
import {
  MODEL_LABELS,
  type ObservedBackend,
  REQUEST_SERIES,
  sample,
  startObservedBackend,
} from './support/observed-backend.js';

const tiny = optionalModel('tinystories-656k');

let backend: ObservedBackend;

describe.skipIf(!tiny.path)(`metrics after the start-up warmup${tiny.skipped}`, () => {
  beforeAll(async () => {
    backend = await startObservedBackend({ STRATA_WARMUP: 'true' });
    await backend.start();
  }, 120_000);
  afterAll(async () => {
    await backend?.close();
  });

  it('keeps the warmup out of the vllm:* series and counts it under strata_backend_warmup_*', async () => {
    const done = backend.logs.find((l) => l.msg === 'warmup done') as
      | { warmup: { requests: number } }
      | undefined;
    expect(done?.warmup.requests).toBeGreaterThan(0);
    const engine = backend.host.loaded?.engine.stats();
    expect(engine?.prefixCacheQueries).toBeGreaterThan(0);

    const samples = await backend.scrape();
    for (const name of REQUEST_SERIES) expect(sample(samples, name, MODEL_LABELS), name).toBe(0);
    for (const reason of ['stop', 'length', 'abort', 'error']) {
      expect(
        sample(samples, 'vllm:request_success_total', { ...MODEL_LABELS, finished_reason: reason }),
      ).toBe(0);
    }
    expect(sample(samples, 'strata_backend_warmup_requests_total', MODEL_LABELS)).toBe(done?.warmup.requests);
    // Every warmup request generates 8 tokens (ignore_eos).
    expect(
      sample(samples, 'strata_backend_warmup_tokens_total', { ...MODEL_LABELS, kind: 'generation' }),
    ).toBe(8 * (done?.warmup.requests ?? 0));
    expect(
      sample(samples, 'strata_backend_warmup_tokens_total', { ...MODEL_LABELS, kind: 'prompt' }),
    ).toBeGreaterThan(0);
    // One line sums the warmup up; its requests have no 'request finished' line at info level.
    expect(backend.logs.filter((l) => l.msg === 'request finished')).toEqual([]);
  });

  it('then counts a client request exactly, as if the warmup had not run', async () => {
    const before = backend.host.loaded?.engine.stats();
    const res = await fetch(`${backend.url}/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 5, temperature: 0, ignore_eos: true }),
    });
    expect(res.status).toBe(200);
    const { usage } = await json(res);
    const after = backend.host.loaded?.engine.stats();
    const samples = await backend.scrape();
    expect(sample(samples, 'vllm:prompt_tokens_total', MODEL_LABELS)).toBe(usage.input_tokens);
    expect(sample(samples, 'vllm:generation_tokens_total', MODEL_LABELS)).toBe(5);
    expect(
      sample(samples, 'vllm:request_success_total', { ...MODEL_LABELS, finished_reason: 'length' }),
    ).toBe(1);
    expect(sample(samples, 'vllm:e2e_request_latency_seconds_count', MODEL_LABELS)).toBe(1);
    expect(sample(samples, 'vllm:iteration_tokens_total_count', MODEL_LABELS)).toBe(5);
    expect(sample(samples, 'vllm:prefix_cache_queries_total', MODEL_LABELS)).toBe(
      (after?.prefixCacheQueries ?? 0) - (before?.prefixCacheQueries ?? 0),
    );
    expect(backend.logs.filter((l) => l.msg === 'request finished')).toHaveLength(1);
  });
});

describe.skipIf(!tiny.path)(`a shutdown during warmup${tiny.skipped}`, () => {
  it('is logged as a stop, not as a failure to load', async () => {
    const stopped = await startObservedBackend({ STRATA_WARMUP: 'true' });
    const starting = stopped.start();
    // Close as soon as the model is loaded and warmup has begun.
    for (let i = 0; i < 500 && !stopped.logs.some((l) => l.msg === 'model loaded'); i++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    await stopped.host.close();
    await starting;
    await stopped.close();
    expect(stopped.logs.some((l) => l.msg === 'model load stopped: the service is shutting down')).toBe(true);
    expect(stopped.logs.filter((l) => l.level === 'error')).toEqual([]);
  });
});
