// Benchmark: streamed chat completions end to end on the default platform, as a user meets it.
// Starts `strata-platform up` (edge -> router -> backend, the backend serving its default model:
// SmolLM2-135M-Instruct Q4_1 once the set-up has fetched it), waits out the backend's warmup,
// then sends rounds of C concurrent streamed chat completions through the edge with the official
// `openai` client and measures, per stream, the time to the first content chunk (TTFT) and the
// gaps between content chunks (ITL). Rounds at each concurrency are repeated (--repeats) and
// alternate with the other concurrencies, so a slow spell of the machine shows as spread.
//   node load-testing/bench/chat-streams.mjs [--concurrency 1,32] [--max-tokens 64] [--repeats 3]
//     [--out docs/benchmarks/chat-streams.json]
// Prints a table (p50 / p99 over every stream of the rounds, and the min-max of the per-round
// p50s) and writes the JSON.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..');
const { values } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,32' },
    'max-tokens': { type: 'string', default: '64' },
    repeats: { type: 'string', default: '3' },
    out: { type: 'string', default: join(repo, 'docs', 'benchmarks', 'chat-streams.json') },
  },
});
const concurrencies = values.concurrency.split(',').map(Number);
const maxTokens = Number(values['max-tokens']);
const repeats = Number(values.repeats);
for (const [name, v] of [
  ['--concurrency', Math.min(...concurrencies)],
  ['--max-tokens', maxTokens],
  ['--repeats', repeats],
]) {
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name} takes positive integers`);
}

const say = (line) => process.stderr.write(`[chat-streams] ${line}\n`);

// ---- the platform ------------------------------------------------------------------------------
const launcher = spawn(
  process.execPath,
  [join(repo, 'load-testing', 'dist', 'cli.js'), 'up', '--ephemeral', '--quiet'],
  {
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);
const stopPlatform = () => {
  if (launcher.exitCode === null) launcher.kill('SIGTERM');
};
process.once('exit', stopPlatform);
const urls = new Map();
let modelLine = '';
await new Promise((resolve, reject) => {
  launcher.once('exit', (code) => reject(new Error(`strata-platform up exited with ${code}`)));
  createInterface({ input: launcher.stdout }).on('line', (line) => {
    const url = /^ {2}(\S+)\s+(http:\/\/\S+)/.exec(line);
    if (url) urls.set(url[1], url[2]);
    if (/^\s+model:/.test(line)) modelLine = line.trim();
    if (line.startsWith('Press Ctrl-C')) resolve();
  });
});
const edge = urls.get('edge-gateway');
const backend = urls.get('inference-backend');
say(`platform up (${modelLine || 'model not printed'}); waiting for the backend's warmup`);
const warmupStarted = performance.now();
for (;;) {
  const ready = await fetch(`${backend}/health/ready`).then(
    (r) => r.status === 200,
    () => false,
  );
  if (ready) break;
  if (performance.now() - warmupStarted > 600_000)
    throw new Error('the backend was not ready after 10 minutes');
  await new Promise((r) => setTimeout(r, 1000));
}
say(`backend ready after ${((performance.now() - warmupStarted) / 1e3).toFixed(0)} s`);

const client = new OpenAI({ baseURL: `${edge}/v1`, apiKey: 'local', maxRetries: 0, timeout: 600_000 });
const model = (await (await fetch(`${backend}/v1/models`)).json()).data?.[0]?.id;
if (!model) throw new Error('the backend lists no model');
// The router holds the backend out for a while after its warmup (probe backoff): wait until a
// chat completion gets through the edge.
for (let tries = 0; ; tries++) {
  try {
    await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 1,
    });
    break;
  } catch (err) {
    if (tries > 120) throw err;
    await new Promise((r) => setTimeout(r, 1000));
  }
}
say(`the edge serves ${model}`);

// ---- the streams -------------------------------------------------------------------------------
const questions = [
  'What is the capital of France?',
  'Write a haiku about the sea.',
  'Give me three tips for learning to cook.',
  'Explain what a GPU is to a child.',
  'Why is the sky blue?',
  'Name four planets of the solar system.',
  'How do I boil an egg?',
  'Tell me a short story about a cat.',
];

async function stream(i) {
  const started = performance.now();
  const stamps = [];
  const res = await client.chat.completions.create({
    model,
    stream: true,
    max_tokens: maxTokens,
    temperature: 0.7,
    seed: i,
    messages: [{ role: 'user', content: questions[i % questions.length] }],
  });
  let finish = null;
  for await (const chunk of res) {
    const choice = chunk.choices[0];
    if (choice?.delta?.content) stamps.push(performance.now());
    if (choice?.finish_reason) finish = choice.finish_reason;
  }
  const ended = performance.now();
  const gaps = stamps.slice(1).map((t, k) => t - stamps[k]);
  return {
    ttft_ms: stamps.length ? stamps[0] - started : null,
    itl_ms: gaps,
    chunks: stamps.length,
    finish,
    total_ms: ended - started,
  };
}

const quantile = (xs, q) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

const rounds = Object.fromEntries(concurrencies.map((c) => [c, []]));
for (let r = 0; r < repeats; r++) {
  const order = r % 2 === 0 ? concurrencies : [...concurrencies].reverse();
  for (const c of order) {
    const started = performance.now();
    const streams = await Promise.all(Array.from({ length: c }, (_, i) => stream(r * 1000 + i)));
    const wall = (performance.now() - started) / 1e3;
    const chunks = streams.reduce((n, s) => n + s.chunks, 0);
    const ttfts = streams.map((s) => s.ttft_ms).filter((t) => t !== null);
    const itls = streams.flatMap((s) => s.itl_ms);
    rounds[c].push({
      wall_s: wall,
      chunks,
      chunks_per_s: chunks / wall,
      ttft_p50: quantile(ttfts, 0.5),
      itl_p50: quantile(itls, 0.5),
      streams,
    });
    say(
      `repeat ${r + 1}/${repeats}, ${c} streams: ${wall.toFixed(1)} s, ${chunks} chunks, TTFT p50 ${quantile(ttfts, 0.5)?.toFixed(0)} ms, ITL p50 ${quantile(itls, 0.5)?.toFixed(0)} ms`,
    );
  }
}
stopPlatform();

const rows = concurrencies.map((c) => {
  const all = rounds[c].flatMap((round) => round.streams);
  const ttfts = all.map((s) => s.ttft_ms).filter((t) => t !== null);
  const itls = all.flatMap((s) => s.itl_ms);
  const range = (key) => [
    Math.min(...rounds[c].map((x) => x[key])),
    Math.max(...rounds[c].map((x) => x[key])),
  ];
  return {
    concurrency: c,
    streams: all.length,
    ttft_ms: { p50: quantile(ttfts, 0.5), p99: quantile(ttfts, 0.99), round_p50_range: range('ttft_p50') },
    itl_ms: { p50: quantile(itls, 0.5), p99: quantile(itls, 0.99), round_p50_range: range('itl_p50') },
    chunks_per_s: {
      median: quantile(
        rounds[c].map((x) => x.chunks_per_s),
        0.5,
      ),
      range: range('chunks_per_s'),
    },
    finish_reasons: Object.fromEntries(
      [...new Set(all.map((s) => s.finish))].map((f) => [f, all.filter((s) => s.finish === f).length]),
    ),
  };
});

const f0 = (x) => (x === null ? '-' : x.toFixed(0));
console.log(
  `\n${model} through edge -> router -> backend, max_tokens ${maxTokens}, ${repeats} rounds each, ${cpus()[0]?.model ?? 'cpu'} x${cpus().length}`,
);
console.log('streams  TTFT p50   TTFT p99   ITL p50   ITL p99   chunks/s (median, min-max)');
for (const r of rows) {
  console.log(
    `${String(r.concurrency).padEnd(9)}${`${f0(r.ttft_ms.p50)} ms`.padEnd(11)}${`${f0(r.ttft_ms.p99)} ms`.padEnd(11)}${`${f0(r.itl_ms.p50)} ms`.padEnd(10)}${`${f0(r.itl_ms.p99)} ms`.padEnd(10)}${f0(r.chunks_per_s.median)} (${f0(r.chunks_per_s.range[0])}-${f0(r.chunks_per_s.range[1])})`,
  );
}
writeFileSync(
  values.out,
  `${JSON.stringify(
    {
      command: 'node load-testing/bench/chat-streams.mjs',
      date: new Date().toISOString(),
      machine: { cpu: cpus()[0]?.model, cores: cpus().length },
      model,
      max_tokens: maxTokens,
      repeats,
      rows,
      raw: rounds,
    },
    null,
    1,
  )}\n`,
);
console.log(`wrote ${values.out}`);
process.exit(0);
