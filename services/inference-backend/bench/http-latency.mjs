#!/usr/bin/env node
// Benchmark: what the HTTP layer (Fastify + SSE) adds on top of the engine. The backend runs
// in this process (from dist/, as in the service); the client runs in a worker thread so its
// parsing does not share the server's event loop. For each concurrency it measures, at the
// client, TTFT (request sent -> first token event) and inter-token latency (gaps between token
// events), next to the service-side values (RuntimeObserver RequestRecords: arrival in the
// runtime -> token out of the engine, before serialization), the difference (HTTP-added
// latency), and the server's event-loop delay p99 (perf_hooks.monitorEventLoopDelay).
//   STRATA_MODELS_DIR=../shared/models node bench/http-latency.mjs [--model DIR]
//     [--concurrency 1,64,256] [--max-tokens 64] [--threads N]
// Build first (pnpm exec tsc -p tsconfig.build.json). Prints a table and writes
// docs/benchmarks/http-latency.json. Target: <= 1 ms p99 added per token at 256 streams.
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';

const NAMES = [
  'Lily',
  'Tom',
  'Sue',
  'Max',
  'Anna',
  'Ben',
  'Mia',
  'Sam',
  'Zoe',
  'Tim',
  'Jack',
  'Amy',
  'Leo',
  'Eva',
  'Dan',
  'Kim',
];
const THINGS = [
  'ball',
  'cat',
  'tree',
  'boat',
  'cake',
  'dog',
  'bird',
  'car',
  'hat',
  'box',
  'sun',
  'fish',
  'toy',
  'park',
  'bed',
  'cup',
];
const promptFor = (i) =>
  `${NAMES[i % 16]} saw a ${THINGS[Math.floor(i / 16) % 16]} and a ${THINGS[(i * 7) % 16]}. One day`;

// ---------------------------------------------------------------- client (worker thread)
async function stream(url, body) {
  const sent = performance.now();
  const res = await fetch(`${url}/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (res.status !== 200) return { ok: false, status: res.status, ttft: undefined, itl: [] };
  const decoder = new TextDecoder();
  let buffer = '';
  let ttft;
  let last = 0;
  const itl = [];
  let done = false;
  for await (const chunk of res.body) {
    const now = performance.now();
    buffer += decoder.decode(chunk, { stream: true });
    let end = buffer.indexOf('\n\n');
    while (end >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      end = buffer.indexOf('\n\n');
      if (!frame.startsWith('data: ')) continue;
      const event = JSON.parse(frame.slice(6));
      if (event.type === 'token') {
        if (ttft === undefined) ttft = now - sent;
        else itl.push(now - last);
        last = now;
      } else if (event.type === 'done') done = true;
    }
  }
  return { ok: done, status: 200, ttft, itl };
}

async function client({ url, concurrency, waves, maxTokens, salt }) {
  const ttft = [];
  const itl = [];
  let failed = 0;
  for (let w = 0; w < waves; w++) {
    const results = await Promise.all(
      Array.from({ length: concurrency }, (_, i) =>
        stream(url, {
          prompt: promptFor(salt + w * concurrency + i),
          max_tokens: maxTokens,
          temperature: 0,
          ignore_eos: true,
          stream: true,
        }),
      ),
    );
    for (const r of results) {
      if (!r.ok) failed++;
      if (r.ttft !== undefined) ttft.push(r.ttft);
      itl.push(...r.itl);
    }
  }
  return { ttft, itl, failed };
}

if (!isMainThread) {
  parentPort.postMessage(await client(workerData));
} else {
  await main();
}

// ---------------------------------------------------------------- server + report
function pct(values, p) {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length))) - 1];
}

function runClient(options) {
  return new Promise((done, fail) => {
    const worker = new Worker(fileURLToPath(import.meta.url), { workerData: options });
    worker.once('message', done);
    worker.once('error', fail);
  });
}

async function main() {
  const here = dirname(fileURLToPath(import.meta.url));
  const pkg = resolve(here, '..');
  const repo = resolve(pkg, '../..');
  const { values } = parseArgs({
    options: {
      model: { type: 'string' },
      concurrency: { type: 'string', default: '1,64,256' },
      'max-tokens': { type: 'string', default: '64' },
      threads: { type: 'string' },
    },
  });
  const modelDir =
    values.model ??
    (process.env.STRATA_MODELS_DIR && join(process.env.STRATA_MODELS_DIR, 'tinystories-656k'));
  if (!modelDir) throw new Error('pass --model DIR or set STRATA_MODELS_DIR');
  const levels = values.concurrency.split(',').map(Number);
  const maxTokens = Number(values['max-tokens']);

  const { createLogger, createMetrics, loadConfig, Readiness } = await import('@strata/common');
  const { buildApp } = await import(join(pkg, 'dist/app.js'));
  const { configEnv, configSchema } = await import(join(pkg, 'dist/config.js'));
  const { ModelHost } = await import(join(pkg, 'dist/inference/model-host.js'));
  const { loadNativeAddon } = await import(join(pkg, 'dist/native.js'));

  const config = loadConfig({
    schema: configSchema,
    envMap: configEnv,
    env: {
      STRATA_MODEL_DIR: modelDir,
      STRATA_KV_CACHE_BLOCKS: '4096',
      STRATA_MAX_NUM_SEQS: '256',
      STRATA_MAX_QUEUED: '256',
      ...(values.threads ? { STRATA_ENGINE_THREADS: values.threads } : {}),
    },
  });
  let records = [];
  const observer = { finished: (record) => records.push(record), rejected: () => {} };
  const logger = createLogger({ service: 'inference-backend', level: 'silent' });
  const readiness = new Readiness();
  const host = new ModelHost(config, readiness, logger, observer);
  const app = buildApp(
    { config, logger, metrics: createMetrics('inference-backend'), readiness },
    { addon: loadNativeAddon(), host },
  );
  await app.listen({ host: '127.0.0.1', port: 0 });
  await host.start();
  const url = `http://127.0.0.1:${app.server.address().port}`;

  // Warm the HTTP path too (JIT, connection pool) before measuring.
  await runClient({ url, concurrency: 32, waves: 2, maxTokens: 16, salt: 10_000 });

  const rows = [];
  const loop = monitorEventLoopDelay({ resolution: 1 });
  for (const concurrency of levels) {
    const waves = concurrency === 1 ? 30 : concurrency <= 64 ? 4 : 2;
    records = [];
    loop.reset();
    loop.enable();
    const started = performance.now();
    const c = await runClient({ url, concurrency, waves, maxTokens, salt: concurrency * 100 });
    const seconds = (performance.now() - started) / 1e3;
    loop.disable();
    const sTtft = records.filter((r) => r.ttft !== undefined).map((r) => r.ttft * 1e3);
    const sItl = records.flatMap((r) => r.interTokenLatencies.map((s) => s * 1e3));
    const row = {
      concurrency,
      requests: concurrency * waves,
      failed: c.failed,
      tokens_per_s: Math.round((records.reduce((n, r) => n + r.outputTokens, 0) / seconds) * 10) / 10,
      client: {
        ttft_p50: pct(c.ttft, 50),
        ttft_p99: pct(c.ttft, 99),
        itl_p50: pct(c.itl, 50),
        itl_p99: pct(c.itl, 99),
      },
      engine: {
        ttft_p50: pct(sTtft, 50),
        ttft_p99: pct(sTtft, 99),
        itl_p50: pct(sItl, 50),
        itl_p99: pct(sItl, 99),
      },
      event_loop_delay_p99_ms: loop.percentile(99) / 1e6,
    };
    row.added = {
      ttft_p50: row.client.ttft_p50 - row.engine.ttft_p50,
      ttft_p99: row.client.ttft_p99 - row.engine.ttft_p99,
      itl_p50: row.client.itl_p50 - row.engine.itl_p50,
      itl_p99: row.client.itl_p99 - row.engine.itl_p99,
    };
    rows.push(row);
  }
  await app.close();
  await host.close();

  const f = (n) => (Number.isNaN(n) ? '-' : n.toFixed(3)).padStart(8);
  const lines = [
    'all values in ms; client = fetch in a worker thread; engine = RuntimeObserver records; added = client - engine',
    '  conc   reqs fail | TTFT p50: client  engine   added | TTFT p99: client  engine   added | ITL p50: client  engine   added | ITL p99: client  engine   added | loop p99',
  ];
  for (const r of rows) {
    lines.push(
      `${String(r.concurrency).padStart(6)} ${String(r.requests).padStart(6)} ${String(r.failed).padStart(4)} |          ` +
        `${f(r.client.ttft_p50)}${f(r.engine.ttft_p50)}${f(r.added.ttft_p50)} |          ${f(r.client.ttft_p99)}${f(r.engine.ttft_p99)}${f(r.added.ttft_p99)} |` +
        `         ${f(r.client.itl_p50)}${f(r.engine.itl_p50)}${f(r.added.itl_p50)} |         ${f(r.client.itl_p99)}${f(r.engine.itl_p99)}${f(r.added.itl_p99)} | ${f(r.event_loop_delay_p99_ms)}`,
    );
  }
  const top = rows.at(-1);
  lines.push(
    `target: ITL p99 added <= 1 ms at ${top.concurrency} streams: ${top.added.itl_p99.toFixed(3)} ms -> ${top.added.itl_p99 <= 1 ? 'MET' : 'NOT MET'}`,
  );
  console.log(lines.join('\n'));
  const out = join(repo, 'docs', 'benchmarks', 'http-latency.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(
    out,
    `${JSON.stringify(
      {
        benchmark: 'http-latency',
        date: new Date().toISOString(),
        machine: { cpu: cpus()[0]?.model, cores: availableParallelism(), node: process.version },
        model: modelDir.split('/').at(-1),
        max_tokens: maxTokens,
        engine_threads: config.engine.threads,
        units: 'ms',
        notes:
          'client: TTFT = fetch sent -> first token event, ITL = gaps between token events, in a worker thread; ' +
          'engine: RuntimeObserver RequestRecords (arrival in the runtime -> token out of the engine); added = client - engine per percentile',
        rows,
      },
      null,
      2,
    )}\n`,
  );
  console.log(`wrote ${out}`);
  process.exit(0);
}
