// Measures what a huge prompt does to a backend (issue 23, item 7): starts `node dist/main.js`
// as its own process, polls /health/live and /load every 10 ms from here, sends one big prompt per
// route, and prints per route the status, the time to the answer, the longest gap between two
// probe answers meanwhile (an event-loop stall shows up as that gap) and the CPU time the
// backend's main thread spent on the request (robust to other load on the machine).
//
//   node bench/prompt-stall.mjs [--model DIR] [--bytes N] [--text WORD] [--routes a,b,c]
//
// Each route is sent twice: once while probing (the gaps), once alone (mainCpuMs, without the
// probes' own CPU time).
// Run from services/inference-backend after `pnpm run build`; --model defaults to
// $STRATA_MODELS_DIR/tinystories-656k, --bytes to 5 MB, --text to 'a b ' (two tokens per 4 bytes).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    bytes: { type: 'string', default: String(5 * 1024 * 1024) },
    text: { type: 'string', default: 'a b ' },
    routes: { type: 'string', default: 'generate,completions,chat' },
    'max-tokens': { type: 'string', default: '1' },
  },
});
const model = values.model ?? path.join(process.env.STRATA_MODELS_DIR ?? '', 'tinystories-656k');
const bytes = Number(values.bytes);
const text = values.text.repeat(Math.ceil(bytes / Buffer.byteLength(values.text))).slice(0, bytes);
const maxTokens = Number(values['max-tokens']);

const preload = new URL('./prompt-stall-preload.mjs', import.meta.url).href;
const child = spawn(process.execPath, ['--import', preload, 'dist/main.js'], {
  env: {
    ...process.env,
    STRATA_MODEL_DIR: model,
    PORT: '0',
    HOST: '127.0.0.1',
    STRATA_WARMUP: 'false',
    STRATA_KV_CACHE_BLOCKS: '512',
    LOG_LEVEL: 'info',
  },
  stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
});
/** CPU time of the backend's main thread so far, in ms. */
const mainThreadCpuMs = () =>
  new Promise((resolve) => {
    child.once('message', (u) => resolve((u.user + u.system) / 1000));
    child.send('cpu');
  });
const url = await new Promise((resolve, reject) => {
  let out = '';
  child.stdout.on('data', (chunk) => {
    out += chunk;
    const m = /"msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/.exec(out);
    if (m) resolve(m[1]);
  });
  child.on('exit', (code) => reject(new Error(`the backend exited (${code}) before listening:\n${out}`)));
});
for (;;) {
  const ready = await fetch(`${url}/health/ready`).catch(() => null);
  if (ready?.status === 200) break;
  await new Promise((r) => setTimeout(r, 100));
}

// Probes run in a worker thread: this thread's own work (sending a 5 MB body) must not read as
// the backend's stall.
const POLLER = `
const { parentPort, workerData } = require('node:worker_threads');
let stop = false;
parentPort.once('message', () => { stop = true; });
(async () => {
  const { probeGaps } = await import(workerData.probeGapsUrl);
  parentPort.postMessage(await probeGaps(workerData.url, () => stop));
})();
`;

/** Polls `probe` every 10 ms until stopped; then resolves the longest time between two answers. */
function poll(probe) {
  const worker = new Worker(POLLER, {
    eval: true,
    workerData: { url: `${url}${probe}`, probeGapsUrl: new URL('./probe-gaps.mjs', import.meta.url).href },
  });
  return () =>
    new Promise((resolve) => {
      worker.once('message', (result) => {
        void worker.terminate();
        resolve(result);
      });
      worker.postMessage('stop');
    });
}

const bodies = {
  generate: ['/v1/generate', { prompt: text, max_tokens: maxTokens }],
  completions: ['/v1/completions', { prompt: text, max_tokens: maxTokens }],
  chat: ['/v1/chat/completions', { messages: [{ role: 'user', content: text }], max_tokens: maxTokens }],
};
/** Sends `json` to `pathname`: status, answer, wall time and the backend main thread's CPU time. */
async function send(pathname, json) {
  const cpuBefore = await mainThreadCpuMs();
  const started = performance.now();
  const res = await fetch(`${url}${pathname}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: json,
  });
  const answer = await res.json();
  const ms = Math.round(performance.now() - started);
  const mainCpuMs = Math.round((await mainThreadCpuMs()) - cpuBefore);
  return { res, answer, ms, mainCpuMs };
}

const results = [];
for (const route of values.routes.split(',')) {
  const [pathname, body] = bodies[route];
  const json = JSON.stringify(body); // before the probes start: this process's own stall is not the backend's
  const { mainCpuMs } = await send(pathname, json);
  const stops = [poll('/health/live'), poll('/load')];
  await new Promise((r) => setTimeout(r, 200));
  const { res, answer, ms } = await send(pathname, json);
  await new Promise((r) => setTimeout(r, 100));
  const [live, load] = await Promise.all(stops.map((s) => s()));
  results.push({
    route: pathname,
    promptBytes: bytes,
    status: res.status,
    code: answer.error?.code ?? null,
    message: answer.error?.message?.slice(0, 160) ?? null,
    ms,
    mainCpuMs,
    liveMaxGapMs: live.maxGapMs,
    loadMaxGapMs: load.maxGapMs,
  });
}
child.kill('SIGTERM');
console.log(JSON.stringify(results, null, 2));
