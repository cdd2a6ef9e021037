// Engine metrics under vLLM's names, labels and bucket edges (docs/architecture.md, Wire
// contracts), so dashboards, KEDA triggers and the Gateway API Inference Extension built for
// vLLM read them unchanged.
//
// Two sources:
//  - engine state and engine totals (running, waiting, KV usage, preemptions, prefix cache) are
//    read from engine.stats() at scrape time, in prom-client collect(); totals become counters
//    by adding the growth since the last scrape, so they never go down;
//  - per-request timings and token counts come from the runtime's finished-request records.
// The backend's start-up warmup is not client traffic: its requests, steps and engine totals
// stay out of every vllm:* series (dashboards and KEDA read them) and are counted under
// strata_backend_warmup_* instead.
// Every series exists from the start with model_name set: before the model is loaded the
// gauges read 0, the counters and histograms are 0 (no engine, no requests yet).
import { Counter, Gauge, Histogram, type Registry } from '@strata/common';
import type { FinishReason } from '../engine/engine.js';
import type { LoadReport, ModelHost } from '../inference/model-host.js';
import type { RequestRecord, RuntimeObserver } from '../inference/runtime.js';

/** Edges added below 10 ms, where a small model's TTFT and inter-token gaps live. */
export const FINE_BUCKETS_SECONDS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075];

/** vLLM's edges (vllm/v1/metrics/loggers.py). */
export const VLLM_BUCKETS = {
  timeToFirstToken: [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
  ],
  interTokenLatency: [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
  ],
  /** Tokens per engine step (vllm:iteration_tokens_total). */
  iterationTokens: [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
  requestLatency: [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
  ],
} as const;

/** vLLM's edges plus the fine ones below 10 ms, sorted and without duplicates. */
export function withFineBuckets(vllm: readonly number[]): number[] {
  return [...new Set([...FINE_BUCKETS_SECONDS.filter((b) => b < 0.01), ...vllm])].sort((a, b) => a - b);
}

/** vLLM's finished_reason label values; a timeout is an abort to vLLM. */
export const VLLM_FINISHED_REASONS = ['stop', 'length', 'abort', 'error'] as const;
function finishedReason(reason: FinishReason | 'error'): (typeof VLLM_FINISHED_REASONS)[number] {
  return reason === 'timeout' ? 'abort' : reason;
}

type Label = 'model_name';

/**
 * Registers the vllm:* and strata_backend_* engine metrics on `registry` and subscribes them
 * to `host`'s finished and rejected requests.
 */
export function registerEngineMetrics(
  registry: Registry,
  host: ModelHost,
  modelName: string,
): RuntimeObserver {
  const labels = { model_name: modelName };
  const registers = [registry];
  const stats = () => host.loaded?.engine.stats();
  // What every series labelled by model_name alone is made with.
  const perModel = (name: string, help: string) => ({
    name,
    help,
    labelNames: ['model_name' as Label],
    registers,
  });

  const gauge = (name: string, help: string, read: (s: NonNullable<ReturnType<typeof stats>>) => number) =>
    new Gauge<Label>({
      ...perModel(name, help),
      collect() {
        const s = stats();
        this.set(labels, s ? read(s) : 0);
      },
    });
  gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', (s) => s.numRunning);
  gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', (s) => s.numWaiting);
  gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', (s) => s.kvUsage);

  // A counter fed from an engine total: adds what the total grew by since the last scrape,
  // except during warmup; at its end the warmup's share becomes the starting point.
  const skipWarmup: (() => void)[] = [];
  const totalCounter = (
    name: string,
    help: string,
    read: (s: NonNullable<ReturnType<typeof stats>>) => number,
  ) => {
    let seen = 0;
    const counter = new Counter<Label>({
      ...perModel(name, help),
      collect() {
        const s = stats();
        if (!s) return;
        const total = read(s);
        if (total > seen && !host.warmingUp) this.inc(labels, total - seen);
        seen = total;
      },
    });
    counter.inc(labels, 0);
    skipWarmup.push(() => {
      const s = stats();
      if (s) seen = read(s);
    });
  };
  totalCounter(
    'vllm:num_preemptions_total',
    'Cumulative number of preemptions from the engine.',
    (s) => s.numPreemptions,
  );
  totalCounter(
    'vllm:prefix_cache_queries_total',
    'Prefix cache queries, in terms of number of queried tokens.',
    (s) => s.prefixCacheQueries,
  );
  totalCounter(
    'vllm:prefix_cache_hits_total',
    'Prefix cache hits, in terms of number of cached tokens.',
    (s) => s.prefixCacheHits,
  );
  // Structured output (engine.md): the grammar masks, computed beside the forward pass.
  totalCounter(
    'strata_backend_constraint_masks_total',
    'Allowed-token masks computed for constrained requests (one per constrained token).',
    (s) => s.constraintMasks,
  );
  totalCounter(
    'strata_backend_constraint_mask_seconds_total',
    "Seconds the engine's mask thread spent computing masks (overlapped with the forward pass).",
    (s) => s.constraintMaskSeconds,
  );
  totalCounter(
    'strata_backend_constraint_wait_seconds_total',
    'Seconds engine steps waited for masks after their forward pass.',
    (s) => s.constraintWaitSeconds,
  );
  totalCounter(
    'strata_backend_constraint_errors_total',
    'Constrained requests ended (as abort) because their constraint failed; expected to stay 0.',
    (s) => s.constraintErrors,
  );

  const counter = (name: string, help: string) => {
    const c = new Counter<Label>(perModel(name, help));
    c.inc(labels, 0);
    return c;
  };
  const promptTokens = counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.');
  const generationTokens = counter('vllm:generation_tokens_total', 'Number of generation tokens processed.');
  const success = new Counter<Label | 'finished_reason'>({
    name: 'vllm:request_success_total',
    help: 'Count of successfully processed requests.',
    labelNames: ['model_name', 'finished_reason'],
    registers,
  });
  for (const reason of VLLM_FINISHED_REASONS) success.inc({ ...labels, finished_reason: reason }, 0);

  const histogram = (name: string, help: string, vllm: readonly number[]) => {
    const h = new Histogram<Label>({ ...perModel(name, help), buckets: withFineBuckets(vllm) });
    h.zero(labels);
    return h;
  };
  const ttft = histogram(
    'vllm:time_to_first_token_seconds',
    'Histogram of time to first token in seconds.',
    VLLM_BUCKETS.timeToFirstToken,
  );
  const itl = histogram(
    'vllm:inter_token_latency_seconds',
    'Histogram of inter-token latency in seconds.',
    VLLM_BUCKETS.interTokenLatency,
  );
  const e2e = histogram(
    'vllm:e2e_request_latency_seconds',
    'Histogram of e2e request latency in seconds.',
    VLLM_BUCKETS.requestLatency,
  );
  const queue = histogram(
    'vllm:request_queue_time_seconds',
    'Histogram of time spent in WAITING phase for request.',
    VLLM_BUCKETS.requestLatency,
  );
  const prefill = histogram(
    'vllm:request_prefill_time_seconds',
    'Histogram of time spent in PREFILL phase for request.',
    VLLM_BUCKETS.requestLatency,
  );
  const decode = histogram(
    'vllm:request_decode_time_seconds',
    'Histogram of time spent in DECODE phase for request.',
    VLLM_BUCKETS.requestLatency,
  );

  // Not a time: vLLM's edges as they are (the name ends in _total, as vLLM's does).
  const iterationTokens = new Histogram<Label>({
    ...perModel('vllm:iteration_tokens_total', 'Histogram of number of tokens per engine_step.'),
    buckets: [...VLLM_BUCKETS.iterationTokens],
  });
  iterationTokens.zero(labels);

  const rejected = new Counter<'code'>({
    name: 'strata_backend_requests_rejected_total',
    help: 'Requests refused before reaching the engine (queue full, bad input), by error code.',
    labelNames: ['code'],
    registers,
  });

  const warmupRequests = counter(
    'strata_backend_warmup_requests_total',
    "Requests of the backend's own start-up warmup (kept out of the vllm:* request metrics).",
  );
  const warmupTokens = new Counter<Label | 'kind'>({
    name: 'strata_backend_warmup_tokens_total',
    help: 'Tokens of the start-up warmup, by kind (prompt, generation); not in vllm:*_tokens_total.',
    labelNames: ['model_name', 'kind'],
    registers,
  });
  for (const kind of ['prompt', 'generation']) warmupTokens.inc({ ...labels, kind }, 0);

  // How long the engine took to load the model and how fast the weights came off the disk
  // (a cold node-local cache, a network volume): 0 until the model is loaded.
  const load = (name: string, help: string, read: (r: LoadReport) => number) =>
    new Gauge<Label>({
      ...perModel(name, help),
      collect() {
        const r = host.loadReport;
        this.set(labels, r ? read(r) : 0);
      },
    });
  load(
    'strata_backend_model_load_seconds',
    "Seconds the engine took to load the model's weights.",
    (r) => r.seconds,
  );
  load(
    'strata_backend_model_load_bytes',
    "Bytes of the model's weight files the engine loaded.",
    (r) => r.bytes,
  );
  load(
    'strata_backend_model_load_gb_per_second',
    'Weight bytes loaded per second of engine load, in GB (1e9 bytes) per second.',
    (r) => r.gbPerSecond,
  );

  const observer: RuntimeObserver = {
    finished(r: RequestRecord) {
      if (r.warmup) {
        warmupRequests.inc(labels);
        warmupTokens.inc({ ...labels, kind: 'prompt' }, r.promptTokens);
        warmupTokens.inc({ ...labels, kind: 'generation' }, r.outputTokens);
        return;
      }
      promptTokens.inc(labels, r.promptTokens);
      generationTokens.inc(labels, r.outputTokens);
      success.inc({ ...labels, finished_reason: finishedReason(r.finishReason) });
      e2e.observe(labels, r.e2e);
      if (r.ttft !== undefined) ttft.observe(labels, r.ttft);
      for (const gap of r.interTokenLatencies) itl.observe(labels, gap);
      if (r.queueTime !== undefined) queue.observe(labels, r.queueTime);
      if (r.prefillTime !== undefined) prefill.observe(labels, r.prefillTime);
      if (r.decodeTime !== undefined) decode.observe(labels, r.decodeTime);
    },
    rejected(code: string) {
      rejected.inc({ code });
    },
    forward(batchedTokens: number) {
      if (!host.warmingUp) iterationTokens.observe(labels, batchedTokens);
    },
    warmupDone() {
      for (const skip of skipWarmup) skip();
    },
  };
  host.observe(observer);
  return observer;
}
