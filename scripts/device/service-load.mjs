#!/usr/bin/env node
// Load on a running inference backend, for the GPU plan's service step (service-run.sh): STREAMS
// concurrent `POST /v1/generate` SSE streams (REQUESTS in all, in waves of STREAMS), each a prompt
// of PROMPT random token ids (ids below VOCAB) and MAX_TOKENS greedy tokens (ignore_eos), the
// workload of bench_cuda_e2e --requests N --prompt P --output O, so the service's numbers stand
// next to the engine's alone. Dependency-free (node: modules only): it runs with the bundle's
// Node on a machine without the workspace.
//
// At the client, per token: TTFT (request sent -> first token event parsed) and ITL (gap between
// a stream's token events), p50/p99, and output tokens/s over the whole run. From GET /metrics:
// a scrape before and after the run (the difference of the vllm:* histograms: the server's own
// TTFT, ITL, e2e and queue time, with p50/p99 interpolated in the buckets as Prometheus'
// histogram_quantile does), and one every 250 ms during it (KV cache usage, running and waiting
// requests: their peaks). Writes the JSON to OUT and prints a summary.
//   node scripts/device/service-load.mjs --url http://127.0.0.1:8000 --out load.json
//     [--streams 64] [--requests 64] [--prompt 1024] [--max-tokens 128] [--vocab 128000]
//     [--timeout 300] [--metrics-out metrics.txt]
import { writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { parseArgs } from 'node:util';
import { percentile } from '../../services/inference-backend/bench/percentile.mjs';
import { sseJsonFrames } from '../../services/inference-backend/bench/sse-frames.mjs';

const { values } = parseArgs({
  options: {
    url: { type: 'string', default: 'http://127.0.0.1:8000' },
    out: { type: 'string' },
    streams: { type: 'string', default: '64' },
    requests: { type: 'string' },
    prompt: { type: 'string', default: '1024' },
    'max-tokens': { type: 'string', default: '128' },
    vocab: { type: 'string', default: '128000' },
    seed: { type: 'string', default: '1' },
    timeout: { type: 'string', default: '300' },
    'metrics-out': { type: 'string' },
  },
});
const int = (name) => {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`--${name} wants a whole number >= 1, not ${values[name]}`);
  return n;
};
const streams = int('streams');
const requests = values.requests === undefined ? streams : int('requests');
const promptTokens = int('prompt');
const maxTokens = int('max-tokens');
const vocab = int('vocab');
const deadline = Date.now() + int('timeout') * 1000;
const url = values.url.replace(/\/$/, '');
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

// ---- metrics: Prometheus text -> { 'name{labels}': value }
function parseMetrics(text) {
  const samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

function get(path) {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method: 'GET', timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        body += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path}: no answer in 10 s`)));
    req.on('error', reject);
    req.end();
  });
}

/** One metric's value, summed over its series (every model_name; a label filter when given). */
function metric(samples, name, filter = '') {
  let sum = 0;
  let found = false;
  for (const [key, value] of samples) {
    const base = key.split('{')[0];
    if (base === name && key.includes(filter)) {
      sum += value;
      found = true;
    }
  }
  return found ? sum : null;
}

/** A histogram's buckets (le -> cumulative count), count and sum. */
function histogram(samples, name) {
  const buckets = new Map();
  for (const [key, value] of samples) {
    if (!key.startsWith(`${name}_bucket{`)) continue;
    const le = /le="([^"]+)"/.exec(key)?.[1];
    if (le === undefined) continue;
    const edge = le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le);
    buckets.set(edge, (buckets.get(edge) ?? 0) + value);
  }
  return { buckets, count: metric(samples, `${name}_count`) ?? 0, sum: metric(samples, `${name}_sum`) ?? 0 };
}

/** What `after` counted that `before` had not; p50/p99 as histogram_quantile interpolates them. */
function histogramDelta(before, after, name) {
  const a = histogram(after, name);
  const b = histogram(before, name);
  const edges = [...a.buckets.keys()].sort((x, y) => x - y);
  const cumulative = edges.map((edge) => (a.buckets.get(edge) ?? 0) - (b.buckets.get(edge) ?? 0));
  const count = a.count - b.count;
  const quantile = (q) => {
    if (count <= 0) return null;
    const rank = q * count;
    for (let i = 0; i < edges.length; i++) {
      if (cumulative[i] >= rank) {
        const upper = edges[i];
        const lower = i === 0 ? 0 : edges[i - 1];
        if (upper === Number.POSITIVE_INFINITY) return lower;
        const below = i === 0 ? 0 : cumulative[i - 1];
        const inBucket = cumulative[i] - below;
        return inBucket > 0 ? lower + ((upper - lower) * (rank - below)) / inBucket : upper;
      }
    }
    return null;
  };
  const ms = (s) => (s === null ? null : round(s * 1e3));
  return {
    count,
    mean_ms: count > 0 ? round(((a.sum - b.sum) / count) * 1e3) : null,
    p50_ms: ms(quantile(0.5)),
    p99_ms: ms(quantile(0.99)),
  };
}

// ---- the load
const round = (x) => Math.round(x * 1000) / 1000;
// Rounded to the µs; null (not NaN, which JSON cannot hold) when there are none.
const pct = (values, p) => (values.length === 0 ? null : round(percentile(values, p)));

// A fixed generator, so every run sends the same prompts (xorshift32).
let state = Number(values.seed) >>> 0 || 1;
function nextId() {
  state ^= state << 13;
  state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5;
  state >>>= 0;
  return state % vocab;
}

function stream(agent, body, requestId) {
  return new Promise((resolve) => {
    const sent = nowMs();
    const times = [];
    let done = null;
    let error = null;
    const finish = (status) => resolve({ requestId, status, sent, times, done, error, ended: nowMs() });
    const req = request(
      `${url}/v1/generate`,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'x-request-id': requestId },
        timeout: Math.max(1000, deadline - Date.now()),
      },
      (res) => {
        if (res.statusCode !== 200) {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk) => {
            text += chunk;
          });
          res.on('end', () => {
            error = text.slice(0, 300);
            finish(res.statusCode);
          });
          return;
        }
        res.setEncoding('utf8');
        let now = 0;
        const frames = sseJsonFrames((event) => {
          if (event.type === 'token') times[event.index] = now;
          else if (event.type === 'done') done = event;
          else if (event.type === 'error') error = JSON.stringify(event.error).slice(0, 300);
        });
        res.on('data', (chunk) => {
          now = nowMs();
          frames(chunk);
        });
        res.on('end', () => finish(200));
        res.on('error', (err) => {
          error = err.message;
          finish(200);
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('the run went past --timeout')));
    req.on('error', (err) => {
      error = err.message;
      finish(0);
    });
    req.end(JSON.stringify(body));
  });
}

async function main() {
  const before = parseMetrics((await get('/metrics')).body);
  const agent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const bodies = Array.from({ length: requests }, () => ({
    prompt: Array.from({ length: promptTokens }, nextId),
    max_tokens: maxTokens,
    temperature: 0,
    ignore_eos: true,
    stream: true,
  }));

  // During the run: KV usage, running and waiting requests, every 250 ms.
  const samples = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      try {
        const m = parseMetrics((await get('/metrics')).body);
        samples.push({
          kv_cache_usage: metric(m, 'vllm:kv_cache_usage_perc'),
          running: metric(m, 'vllm:num_requests_running'),
          waiting: metric(m, 'vllm:num_requests_waiting'),
        });
      } catch {
        // a scrape that failed under load is left out
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  })();

  const started = nowMs();
  const results = [];
  for (let w = 0; w < bodies.length; w += streams) {
    const wave = bodies.slice(w, w + streams);
    results.push(...(await Promise.all(wave.map((body, i) => stream(agent, body, `load-${w + i}`)))));
  }
  const seconds = (nowMs() - started) / 1e3;
  sampling = false;
  await sampler;
  agent.destroy();
  const afterText = (await get('/metrics')).body;
  const after = parseMetrics(afterText);
  if (values['metrics-out']) writeFileSync(values['metrics-out'], afterText);

  const ttft = [];
  const itl = [];
  const e2e = [];
  let tokens = 0;
  const failures = [];
  for (const r of results) {
    const complete = r.done !== null && r.times.length === maxTokens && !r.times.includes(undefined);
    if (!complete) {
      failures.push({ request: r.requestId, status: r.status, tokens: r.times.length, error: r.error });
      continue;
    }
    tokens += r.times.length;
    ttft.push(r.times[0] - r.sent);
    e2e.push(r.ended - r.sent);
    for (let k = 1; k < r.times.length; k++) itl.push(r.times[k] - r.times[k - 1]);
  }
  const peak = (key) => {
    const xs = samples.map((s) => s[key]).filter((x) => x !== null);
    return xs.length === 0 ? null : Math.max(...xs);
  };
  const report = {
    benchmark: 'service-load',
    date: new Date().toISOString(),
    url,
    workload: {
      streams,
      requests,
      prompt_tokens: promptTokens,
      max_tokens: maxTokens,
      vocab,
      sampling: 'greedy, ignore_eos',
    },
    seconds: round(seconds),
    completed: results.length - failures.length,
    failed: failures.length,
    failures: failures.slice(0, 5),
    output_tokens: tokens,
    output_tokens_per_s: round(tokens / seconds),
    total_tokens_per_s: round((tokens + (results.length - failures.length) * promptTokens) / seconds),
    client: {
      ttft_ms: { p50: pct(ttft, 50), p99: pct(ttft, 99) },
      itl_ms: { p50: pct(itl, 50), p99: pct(itl, 99), samples: itl.length },
      e2e_ms: { p50: pct(e2e, 50), p99: pct(e2e, 99) },
    },
    server_metrics: {
      ttft: histogramDelta(before, after, 'vllm:time_to_first_token_seconds'),
      itl: histogramDelta(before, after, 'vllm:inter_token_latency_seconds'),
      e2e: histogramDelta(before, after, 'vllm:e2e_request_latency_seconds'),
      queue: histogramDelta(before, after, 'vllm:request_queue_time_seconds'),
      generation_tokens:
        (metric(after, 'vllm:generation_tokens_total') ?? 0) -
        (metric(before, 'vllm:generation_tokens_total') ?? 0),
      prompt_tokens:
        (metric(after, 'vllm:prompt_tokens_total') ?? 0) - (metric(before, 'vllm:prompt_tokens_total') ?? 0),
      preemptions:
        (metric(after, 'vllm:num_preemptions_total') ?? 0) -
        (metric(before, 'vllm:num_preemptions_total') ?? 0),
      kv_cache_usage_peak: peak('kv_cache_usage'),
      running_peak: peak('running'),
      waiting_peak: peak('waiting'),
      scrapes_during_run: samples.length,
      kv_cache_usage_after: metric(after, 'vllm:kv_cache_usage_perc'),
    },
  };
  if (values.out) writeFileSync(values.out, `${JSON.stringify(report, null, 2)}\n`);
  const f = (x) => (x === null ? '-' : x.toFixed(1));
  const m = report.server_metrics;
  console.log(
    [
      `service load: ${requests} requests, ${streams} concurrent streams, ${promptTokens} prompt + ${maxTokens} output tokens each: ` +
        `${report.completed} completed, ${report.failed} failed in ${seconds.toFixed(2)} s`,
      `  client: TTFT p50 ${f(report.client.ttft_ms.p50)} ms p99 ${f(report.client.ttft_ms.p99)} ms; ITL p50 ${f(report.client.itl_ms.p50)} ms p99 ${f(report.client.itl_ms.p99)} ms; ` +
        `${report.output_tokens_per_s.toFixed(0)} output tok/s, ${report.total_tokens_per_s.toFixed(0)} total tok/s`,
      `  /metrics: TTFT p50 ${f(m.ttft.p50_ms)} ms p99 ${f(m.ttft.p99_ms)} ms; ITL p50 ${f(m.itl.p50_ms)} ms p99 ${f(m.itl.p99_ms)} ms (${m.itl.count} gaps); ` +
        `KV usage peak ${m.kv_cache_usage_peak === null ? '-' : (m.kv_cache_usage_peak * 100).toFixed(1)}%, running peak ${m.running_peak ?? '-'}, ` +
        `waiting peak ${m.waiting_peak ?? '-'}, preemptions ${m.preemptions}`,
      ...failures
        .slice(0, 3)
        .map((x) => `  FAIL ${x.request}: status ${x.status}, ${x.tokens} tokens, ${x.error ?? ''}`),
    ].join('\n'),
  );
  process.exit(failures.length === 0 ? 0 : 1);
}

await main();
