// Load generator for the hop benchmarks (hop-lib.mjs), in its own process. argv: JSON job
//   {url, undici (module URL), headers, mode: 'open' (fixed rate) | 'closed' (fixed concurrency),
//    rate, concurrency, seconds, warmup}
// Runs warmup + seconds; only requests sent after the warmup are measured, so the connection
// pools (client -> hop -> upstream) have grown to what the load needs and the code is compiled.
// Prints one JSON line: latencies (ms) of first byte and of the whole response, and req/s.
import { monitorEventLoopDelay } from 'node:perf_hooks';

const job = JSON.parse(process.argv[2]);
// undici comes from the benchmarked package (this folder has no dependencies of its own).
const { Pool } = await import(job.undici);
const pool = new Pool(job.url, { connections: job.mode === 'open' ? 256 : job.concurrency, pipelining: 1 });
const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 3, stream: true });
const headers = { 'content-type': 'application/json', ...job.headers };
const firstByte = [];
const total = [];
let errors = 0;

async function one() {
  const t0 = performance.now();
  const measured = t0 >= measureFrom;
  try {
    const res = await pool.request({ path: '/v1/generate', method: 'POST', headers, body });
    let first = 0;
    for await (const _chunk of res.body) if (first === 0) first = performance.now();
    const end = performance.now();
    if (!measured) return;
    if (res.statusCode !== 200) errors++;
    else {
      firstByte.push(first - t0);
      total.push(end - t0);
    }
  } catch {
    if (measured) errors++;
  }
}

// The generator's own stalls would show up as latency: measured, to tell them apart.
const loop = monitorEventLoopDelay({ resolution: 1 });
const started = performance.now();
const measureFrom = started + (job.warmup ?? 0) * 1000;
const deadline = measureFrom + job.seconds * 1000;
setTimeout(() => loop.enable(), measureFrom - started);
const inflight = new Set();
if (job.mode === 'open') {
  // Send on schedule regardless of responses: latency is not hidden by back-off (open loop).
  let sent = 0;
  while (performance.now() < deadline) {
    const due = Math.floor(((performance.now() - started) / 1000) * job.rate);
    for (; sent < due; sent++) {
      const p = one().finally(() => inflight.delete(p));
      inflight.add(p);
    }
    await new Promise((r) => setTimeout(r, 1));
  }
} else {
  await Promise.all(
    Array.from({ length: job.concurrency }, async () => {
      while (performance.now() < deadline) await one();
    }),
  );
}
await Promise.all(inflight);
const seconds = (performance.now() - measureFrom) / 1000;
await pool.close();
const pct = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)] : Number.NaN;
};
process.stdout.write(
  `${JSON.stringify({
    requests: total.length,
    errors,
    rps: total.length / seconds,
    client_event_loop_delay_ms: { p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 },
    first_byte_ms: { p50: pct(firstByte, 0.5), p99: pct(firstByte, 0.99) },
    total_ms: { p50: pct(total, 0.5), p99: pct(total, 0.99) },
  })}\n`,
);
