#!/usr/bin/env node
// Benchmark: what the HTTP layer (Fastify + SSE) adds on top of the engine. The backend runs
// in this process (from dist/, as in the service). Two clients take turns at each concurrency:
// node:http in a worker thread (its parsing does not share the server's event loop), and
// bench/sse-client.c, an epoll loop in its own process that costs the cores the server shares
// with it far less CPU (built here with `cc` on first use). For every token it pairs the
// moment the engine sampled it (native step output, RequestRecord.sampledAt) with the moment the
// client parsed its event, both on the process-wide monotonic clock, and reports per
// concurrency: TTFT and ITL at the client next to the engine's, the ITL each token gained
// ((client gap) - (engine gap)), the delivery latency (client - engine), the server's
// event-loop delay p99 and the event loop's CPU per token.
//   STRATA_MODELS_DIR=/path/to/models node bench/http-latency.mjs [--model DIR]
//     [--concurrency 1,64,256] [--max-tokens 64] [--threads N] [--split] [--client node,native]
//     [--backend cpu|cuda] [--http-workers N] [--out FILE]
// --split also times each socket write, splitting the delivery into server and transport.
// --http-workers N serves from N event loops (STRATA_HTTP_WORKERS): this thread and N - 1 worker
// threads on the same port; the event-loop delay and CPU columns are then this thread's alone.
// Build first (pnpm build). Prints a table and writes docs/benchmarks/http-latency.json (--out:
// another file). STRATA_SSE_CLIENT names a prebuilt sse-client (the GPU machine's bundle).
// Target: <= 1 ms p99 added per token at 256 streams.
import { mkdirSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect, createServer } from 'node:net';
import { availableParallelism, cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { itlTail, tailLine } from './itl-tail.mjs';
import { repo } from './paths.mjs';
import { percentile as pct } from './percentile.mjs';
import { buildSseClient, runSseClient } from './sse-client.mjs';
import { sseJsonFrames } from './sse-frames.mjs';
import { storyPrompt } from './story-prompts.mjs';

const hrMs = () => Number(process.hrtime.bigint()) / 1e6;

// ---------------------------------------------------------------- client (worker thread)
// node:http rather than fetch: the client shares this machine's cores with the server, so the
// cheaper its parsing, the less of its own cost shows up as "added".
function stream(agent, url, body, requestId) {
  return new Promise((resolve) => {
    const sent = hrMs();
    const times = [];
    const fail = (status) => resolve({ ok: false, status, requestId, sent, times });
    const req = request(
      `${url}/v1/generate`,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'x-request-id': requestId } },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          res.on('end', () => fail(res.statusCode));
          return;
        }
        res.setEncoding('utf8');
        let done = false;
        let now = 0;
        const frames = sseJsonFrames((event) => {
          if (event.type === 'token') times[event.index] = now;
          else if (event.type === 'done') done = true;
        });
        res.on('data', (chunk) => {
          now = hrMs();
          frames(chunk);
        });
        res.on('end', () => resolve({ ok: done, status: 200, requestId, sent, times }));
        res.on('error', () => fail(200));
      },
    );
    req.on('error', () => fail(0));
    req.end(JSON.stringify(body));
  });
}

/**
 * The requests of one run, wave after wave: both clients send exactly these. The prompts (at
 * most 14 tokens with BOS) fill no 16-token KV block, so the second client gets no prefix-cache hits
 * from the first.
 */
function benchRequests({ concurrency, waves, maxTokens, salt }) {
  return Array.from({ length: concurrency * waves }, (_, i) => ({
    requestId: `bench-${salt + i}`,
    body: {
      prompt: storyPrompt(salt + i),
      max_tokens: maxTokens,
      temperature: 0,
      ignore_eos: true,
      stream: true,
    },
  }));
}

async function client(options) {
  const agent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const requests = benchRequests(options);
  const results = [];
  for (let w = 0; w < requests.length; w += options.concurrency) {
    const wave = requests.slice(w, w + options.concurrency);
    results.push(...(await Promise.all(wave.map((r) => stream(agent, options.url, r.body, r.requestId)))));
  }
  agent.destroy();
  return results;
}

// The floor's readers: `sockets` plain TCP connections that only drain what they receive.
async function floorReaders({ port, sockets }) {
  const open = await Promise.all(
    Array.from(
      { length: sockets },
      () =>
        new Promise((resolve) => {
          const socket = connect(port, '127.0.0.1', () => resolve(socket));
          socket.resume();
        }),
    ),
  );
  parentPort.postMessage('connected');
  await Promise.all(open.map((socket) => new Promise((resolve) => socket.once('close', resolve))));
}

if (!isMainThread) {
  if (workerData.floor) await floorReaders(workerData.floor);
  else parentPort.postMessage(await client(workerData));
} else {
  await main();
}

// ---------------------------------------------------------------- server + report
/**
 * The least a Node event loop can spend on one token for one stream: a bare net.Socket write of
 * a token-sized SSE frame (no HTTP, no JSON, no engine), to `sockets` readers in a worker thread,
 * in rounds like engine steps. Reports the CPU per write and how long one round (one write per
 * socket) takes: the spread between a step's first and last stream that no HTTP layer avoids.
 */
async function socketWriteFloor(sockets, rounds) {
  const accepted = [];
  const server = createServer((socket) => accepted.push(socket.setNoDelay(true)));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const worker = new Worker(fileURLToPath(import.meta.url), {
    workerData: { floor: { port: server.address().port, sockets } },
  });
  await new Promise((resolve) => worker.once('message', resolve));
  while (accepted.length < sockets) await new Promise((resolve) => setImmediate(resolve));
  const frame = 'data: {"type":"token","token":" there","id":318,"index":3}\n\n';
  const roundMs = [];
  const cpu = process.threadCpuUsage();
  for (let r = 0; r < rounds; r++) {
    const started = performance.now();
    for (const socket of accepted) socket.write(frame);
    roundMs.push(performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 5)); // the next "step"
  }
  const { user, system } = process.threadCpuUsage(cpu);
  for (const socket of accepted) socket.end();
  await new Promise((resolve) => worker.once('exit', resolve));
  server.close();
  return {
    sockets,
    rounds,
    cpu_us_per_write: (user + system) / (sockets * rounds),
    round_ms_p50: pct(roundMs, 50),
    round_ms_p99: pct(roundMs, 99),
  };
}

function runClient(kind, binary, options) {
  if (kind === 'node') {
    return new Promise((done, fail) => {
      const worker = new Worker(fileURLToPath(import.meta.url), { workerData: options });
      worker.once('message', done);
      worker.once('error', fail);
    });
  }
  return runSseClient(binary, options.url, options.concurrency, benchRequests(options));
}

async function main() {
  const { values } = parseArgs({
    options: {
      model: { type: 'string' },
      concurrency: { type: 'string', default: '1,64,256' },
      'max-tokens': { type: 'string', default: '64' },
      threads: { type: 'string' },
      split: { type: 'boolean', default: false },
      client: { type: 'string', default: 'node,native' },
      backend: { type: 'string', default: 'cpu' },
      'http-workers': { type: 'string', default: '1' },
      out: { type: 'string' },
    },
  });
  const clients = values.client.split(',');
  for (const kind of clients)
    if (kind !== 'node' && kind !== 'native') throw new Error(`--client: node or native, not ${kind}`);
  const binary = clients.includes('native') ? buildSseClient() : undefined;
  const modelDir =
    values.model ??
    (process.env.STRATA_MODELS_DIR && join(process.env.STRATA_MODELS_DIR, 'tinystories-656k'));
  if (!modelDir) throw new Error('pass --model DIR or set STRATA_MODELS_DIR');
  if (values.backend !== 'cpu' && values.backend !== 'cuda')
    throw new Error(`--backend: cpu or cuda, not ${values.backend}`);
  const httpWorkers = Number(values['http-workers']);
  if (!Number.isInteger(httpWorkers) || httpWorkers < 1)
    throw new Error(`--http-workers: a whole number >= 1, not ${values['http-workers']}`);
  if (values.split && httpWorkers > 1)
    throw new Error("--split times this thread's writes only: use --http-workers 1");
  const levels = values.concurrency.split(',').map(Number);
  const maxTokens = Number(values['max-tokens']);

  // Plain relative paths, so that scripts/device/bundle-service.sh can bundle this script with the
  // backend (from its sources) for a machine without the workspace.
  const { createLogger, createMetrics, loadConfig, Readiness } = await import('@strata/common');
  const { buildApp } = await import('../dist/app.js');
  const { configEnv, configSchema } = await import('../dist/config.js');
  const { ModelHost } = await import('../dist/inference/model-host.js');
  const { HttpWorkerPool } = await import('../dist/inference/http-workers.js');
  const { loadNativeAddon } = await import('../dist/native.js');

  const config = loadConfig({
    schema: configSchema,
    envMap: configEnv,
    env: {
      STRATA_MODEL_DIR: modelDir,
      STRATA_ENGINE_BACKEND: values.backend,
      STRATA_KV_CACHE_BLOCKS: '4096',
      STRATA_MAX_NUM_SEQS: '256',
      STRATA_MAX_QUEUED: '256',
      STRATA_HTTP_WORKERS: String(httpWorkers),
      ...(values.threads ? { STRATA_ENGINE_THREADS: values.threads } : {}),
    },
  });
  // --split: also note when the server handed each token event to its socket (SseStream.flush),
  // to split the delivery into server (engine -> socket write) and transport + client (write ->
  // parsed). The hook costs a regex per write, so the headline runs go without it.
  const written = new Map();
  if (values.split) {
    const { SseStream } = await import('../dist/http/sse.js');
    const flush = SseStream.prototype.flush;
    SseStream.prototype.flush = function () {
      const at = hrMs();
      const id = this.reply.request.id;
      const list = written.get(id) ?? [];
      written.set(id, list);
      for (const m of this.pending.matchAll(/"index":(\d+)/g)) list[Number(m[1])] = at;
      return flush.call(this);
    };
  }
  const records = new Map();
  const observer = { finished: (record) => records.set(record.requestId, record), rejected: () => {} };
  const logger = createLogger({ service: 'inference-backend', level: 'silent' });
  const readiness = new Readiness();
  const host = new ModelHost(config, readiness, logger, observer);
  const metrics = createMetrics('inference-backend');
  const workers = new HttpWorkerPool({ config, logger, readiness, host, registry: metrics.registry });
  const app = buildApp({ config, logger, metrics, readiness }, { addon: loadNativeAddon(), host });
  await app.listen({ host: '127.0.0.1', port: 0, reusePort: httpWorkers > 1 });
  await host.start();
  const port = app.server.address().port;
  // The other loops (if any) on the same port; their requests' records reach `observer` here.
  await workers.start(host.get().share(), '127.0.0.1', port);
  if (!readiness.ready) throw new Error(`not ready: ${JSON.stringify(readiness.report().checks)}`);
  const url = `http://127.0.0.1:${port}`;
  // Records are on performance.now()'s clock, the client's on the process-wide monotonic clock.
  const toHr = hrMs() - performance.now();

  // Warm the HTTP path too (JIT, connection pool) before measuring.
  for (const kind of clients)
    await runClient(kind, binary, { url, concurrency: 32, waves: 2, maxTokens: 16, salt: 10_000 });

  const rows = [];
  const loop = monitorEventLoopDelay({ resolution: 1 });
  // This thread's GC pauses, on the clients' clock, for the tail's breakdown (itl-tail.mjs).
  let gcPauses = [];
  const keepPauses = (entries) => {
    for (const e of entries) gcPauses.push({ start: e.startTime + toHr, duration: e.duration });
  };
  const gc = new PerformanceObserver((list) => keepPauses(list.getEntries()));
  gc.observe({ entryTypes: ['gc'] });
  for (const concurrency of levels)
    for (const kind of clients) {
      const waves = concurrency === 1 ? 30 : concurrency <= 64 ? 4 : 2;
      records.clear();
      written.clear();
      gcPauses = [];
      loop.reset();
      loop.enable();
      const started = performance.now();
      const cpu = process.threadCpuUsage();
      const results = await runClient(kind, binary, {
        url,
        concurrency,
        waves,
        maxTokens,
        salt: concurrency * 100,
      });
      const seconds = (performance.now() - started) / 1e3;
      const { user, system } = process.threadCpuUsage(cpu);
      loop.disable();
      keepPauses(gc.takeRecords());
      const s = {
        cTtft: [],
        eTtft: [],
        cItl: [],
        eItl: [],
        delivery: [],
        pairedItl: [],
        tail: [],
        server: [],
        transport: [],
      };
      let failed = 0;
      let tokens = 0;
      for (const r of results) {
        const record = records.get(r.requestId);
        if (!r.ok || !record || r.times.length !== record.sampledAt.length || r.times.includes(undefined)) {
          failed++;
          continue;
        }
        const engine = record.sampledAt.map((t) => t + toHr);
        const got = r.times;
        tokens += got.length;
        if (got.length === 0) continue;
        s.cTtft.push(got[0] - r.sent);
        s.eTtft.push(engine[0] - (record.arrivedAt + toHr));
        for (let k = 0; k < got.length; k++) {
          s.delivery.push(got[k] - engine[k]);
          const w = written.get(r.requestId)?.[k];
          if (w !== undefined) {
            s.server.push(w - engine[k]);
            s.transport.push(got[k] - w);
          }
          if (k === 0) continue;
          const c = got[k] - got[k - 1];
          const e = engine[k] - engine[k - 1];
          s.cItl.push(c);
          s.eItl.push(e);
          s.pairedItl.push(c - e);
          s.tail.push({ engine: engine[k], added: c - e, delivery: got[k] - engine[k] });
        }
      }
      const both = (client, engine) => {
        const out = {};
        for (const p of [50, 99]) {
          out[`client_p${p}`] = pct(client, p);
          out[`engine_p${p}`] = pct(engine, p);
          out[`added_p${p}`] = out[`client_p${p}`] - out[`engine_p${p}`];
        }
        return out;
      };
      rows.push({
        concurrency,
        client: kind,
        requests: results.length,
        failed,
        tokens_per_s: Math.round((tokens / seconds) * 10) / 10,
        ttft: both(s.cTtft, s.eTtft),
        itl: both(s.cItl, s.eItl),
        itl_added_per_token: {
          p50: pct(s.pairedItl, 50),
          p99: pct(s.pairedItl, 99),
          samples: s.pairedItl.length,
          tail: itlTail(s.tail, gcPauses),
        },
        delivery: {
          p50: pct(s.delivery, 50),
          p99: pct(s.delivery, 99),
          max: pct(s.delivery, 100),
          samples: s.delivery.length,
        },
        event_loop_delay_p99_ms: loop.percentile(99) / 1e6,
        // The server's event-loop thread: CPU per delivered token (HTTP, SSE, detokenization, the
        // engine's JS side) and its busy fraction of the wall time.
        event_loop_cpu_us_per_token: (user + system) / tokens,
        event_loop_busy: (user + system) / 1e6 / seconds,
        ...(values.split
          ? {
              server: { p50: pct(s.server, 50), p99: pct(s.server, 99) },
              transport: { p50: pct(s.transport, 50), p99: pct(s.transport, 99) },
            }
          : {}),
      });
    }
  gc.disconnect();
  const engineThreads = host.get().engine.info.threads;
  await app.close();
  await workers.drain();
  await host.close();
  const floor = await socketWriteFloor(levels.at(-1), 200);

  const f = (n, w = 8) => (Number.isNaN(n) ? '-' : n.toFixed(3)).padStart(w);
  const lines = [
    `engine threads ${engineThreads} of ${availableParallelism()} CPUs; ${httpWorkers} HTTP event loop(s)` +
      (httpWorkers > 1 ? " (loop delay and CPU: the main thread's only)." : '.'),
    'all values in ms. engine = when the engine sampled each token; client = when the client parsed it',
    '(node = node:http in a worker thread; native = bench/sse-client.c in its own process).',
    'ITL added/token = (client gap - engine gap) for the same token; delivery = client time - engine time for each token.',
    '  conc client   reqs fail   tok/s | TTFT p50 client engine | TTFT p99 client engine | ITL p50 client engine | ITL p99 client  engine   added | ITL added/token p50     p99 | delivery p50     p99     max | loop p99 | loop CPU/token busy',
  ];
  for (const r of rows) {
    lines.push(
      `${String(r.concurrency).padStart(6)} ${r.client.padStart(6)} ${String(r.requests).padStart(6)} ${String(r.failed).padStart(4)} ${String(Math.round(r.tokens_per_s)).padStart(7)} |` +
        `      ${f(r.ttft.client_p50)}${f(r.ttft.engine_p50)} |      ${f(r.ttft.client_p99)}${f(r.ttft.engine_p99)} |` +
        `       ${f(r.itl.client_p50, 7)}${f(r.itl.engine_p50, 7)} |` +
        `        ${f(r.itl.client_p99)}${f(r.itl.engine_p99)}${f(r.itl.added_p99)} |` +
        `                ${f(r.itl_added_per_token.p50)}${f(r.itl_added_per_token.p99)} |` +
        `     ${f(r.delivery.p50)}${f(r.delivery.p99)}${f(r.delivery.max)} | ${f(r.event_loop_delay_p99_ms)} | ` +
        `${r.event_loop_cpu_us_per_token.toFixed(1).padStart(6)} us ${(r.event_loop_busy * 100).toFixed(0).padStart(3)}%`,
    );
  }
  lines.push(
    `where the tail of ITL added/token lies (GC: ${httpWorkers > 1 ? "the main thread's only" : 'the serving thread'}):`,
  );
  for (const r of rows)
    lines.push(
      `${String(r.concurrency).padStart(6)} ${r.client.padStart(6)}  ${tailLine(r.itl_added_per_token.tail)}`,
    );
  if (values.split) {
    lines.push(
      'split of the delivery: server = engine -> socket write; transport = socket write -> parsed at the client',
    );
    for (const r of rows)
      lines.push(
        `${String(r.concurrency).padStart(6)} ${r.client.padStart(6)}  server p50 ${f(r.server.p50)} p99 ${f(r.server.p99)} | transport p50 ${f(r.transport.p50)} p99 ${f(r.transport.p99)}`,
      );
  }
  const top = rows.filter((r) => r.concurrency === levels.at(-1));
  lines.push(
    `floor: a bare socket write per stream (no HTTP), ${floor.sockets} sockets: ${floor.cpu_us_per_write.toFixed(1)} us CPU per write; ` +
      `one write to every socket takes p50 ${floor.round_ms_p50.toFixed(3)} ms, p99 ${floor.round_ms_p99.toFixed(3)} ms. ` +
      `The HTTP layer's event-loop CPU per token is ${top.map((r) => `${(r.event_loop_cpu_us_per_token / floor.cpu_us_per_write).toFixed(1)}x (${r.client})`).join(', ')} that write.`,
  );
  const verdict = (v) => `${v.toFixed(3)} ms -> ${v <= 1 ? 'MET' : 'NOT MET'}`;
  for (const r of top)
    lines.push(
      `target <= 1 ms p99 added per token at ${r.concurrency} streams, ${r.client} client: ITL added/token p99 ${verdict(r.itl_added_per_token.p99)}; ` +
        `delivery p99 ${verdict(r.delivery.p99)}`,
    );
  console.log(lines.join('\n'));
  const out = values.out ?? join(repo, 'docs', 'benchmarks', 'http-latency.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(
    out,
    `${JSON.stringify(
      {
        benchmark: 'http-latency',
        date: new Date().toISOString(),
        machine: { cpu: cpus()[0]?.model, cores: availableParallelism(), node: process.version },
        model: modelDir.split('/').at(-1),
        backend: values.backend,
        http_workers: httpWorkers,
        max_tokens: maxTokens,
        engine_threads: engineThreads,
        units: 'ms',
        notes:
          'engine: the moment the engine sampled each token (native step output, before detokenization); ' +
          'client: the moment the client parsed its SSE event (node: node:http in a worker thread; native: bench/sse-client.c, an epoll loop in its own process); ' +
          'both on the monotonic clock (CLOCK_MONOTONIC). ' +
          'ttft/itl: percentiles of each side and their difference; itl_added_per_token: percentiles of (client gap - engine gap) per token, ' +
          "its tail: how many engine steps hold the tokens at or above its p99, and this thread's GC pauses (bench/itl-tail.mjs); " +
          'delivery: percentiles of (client time - engine time) per token',
        rows,
        socket_write_floor: floor,
      },
      null,
      2,
    )}\n`,
  );
  console.log(`wrote ${out}`);
  process.exit(0);
}
