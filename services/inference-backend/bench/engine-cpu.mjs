#!/usr/bin/env node
// Benchmark: Strata's CPU engine (through N-API, as the service drives it) against Hugging
// Face transformers on CPU, on the same model, prompts and threads, side by side in one run.
//   STRATA_MODELS_DIR=/path/to/models node bench/engine-cpu.mjs [--model DIR] [--new-tokens 128]
//     [--batches 1,8,32,128] [--repeats 3] [--threads N] [--skip-hf]
// Prints a table and writes docs/benchmarks/engine-cpu.json. The HF side needs torch and
// transformers: STRATA_BENCH_PYTHON names a python that has them, else a venv at
// .toolchain/bench-venv is created on first use (several GB: PyPI's torch wheel carries CUDA).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pkg, repo } from './paths.mjs';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    'new-tokens': { type: 'string', default: '128' },
    batches: { type: 'string', default: '1,8,32,128' },
    // Each measurement (both sides) runs this many times; the median is reported.
    repeats: { type: 'string', default: '3' },
    // Engine compute threads (default: every core); the HF side always uses every core.
    threads: { type: 'string' },
    'skip-hf': { type: 'boolean', default: false },
  },
});
const modelDir =
  values.model ?? (process.env.STRATA_MODELS_DIR && join(process.env.STRATA_MODELS_DIR, 'tinystories-656k'));
if (!modelDir) throw new Error('pass --model DIR or set STRATA_MODELS_DIR');
const newTokens = Number(values['new-tokens']);
const batches = values.batches.split(',').map(Number);
const repeats = Number(values.repeats);
const threads = availableParallelism();
const engineThreads = values.threads === undefined ? threads : Number(values.threads);
const decodePrompt = [1, 80, 147, 201, 282, 215, 286, 604, 10, 80, 147, 201, 282, 215, 286, 604]; // 16 tokens
// Distinct prompts, so no request reuses another's cached prefix (HF has no prefix cache).
const prefillPrompt = (r) =>
  Array.from({ length: 256 }, (_, i) => (i === 0 ? 1 : 3 + ((i * 97 + r * 131) % 2000)));
const prefillCount = 16;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const { Engine } = await import(join(pkg, 'dist/engine/engine.js'));

// Runs one request per prompt, all at once, consuming tokens as the service would.
async function runBatch(engine, prompts, maxTokens) {
  const params = { temperature: 0, maxTokens, ignoreEos: true };
  const start = performance.now();
  let firstDone = 0;
  let firstAll = 0;
  await Promise.all(
    prompts.map(async (prompt) => {
      let seen = 0;
      for await (const event of engine.generate(prompt, params)) {
        if (event.token !== undefined && ++seen === 1 && ++firstDone === prompts.length)
          firstAll = performance.now();
      }
    }),
  );
  return { start, firstAll, end: performance.now() };
}

async function strata() {
  const engine = await Engine.load({
    modelDir,
    threads: engineThreads,
    maxNumSeqs: 256,
    maxNumBatchedTokens: 8192,
    numBlocks: 4096,
  });
  const out = { info: engine.info, decode: [], prefill: null };
  await runBatch(engine, Array(8).fill(decodePrompt), 8); // warm-up
  const prefillRuns = [];
  for (let i = 0; i < repeats; i++) {
    // New prompts each repeat, so nothing is served from the prefix cache.
    const prompts = Array.from({ length: prefillCount }, (_, r) => prefillPrompt(r + i * prefillCount));
    const p = await runBatch(engine, prompts, 1);
    prefillRuns.push((prefillCount * 256) / ((p.end - p.start) / 1e3));
  }
  out.prefill = {
    tokens: prefillCount * 256,
    tokens_per_s: median(prefillRuns),
    runs_tokens_per_s: prefillRuns,
  };
  for (const batch of batches) {
    // Decode rate: tokens after each request's first, over the time after all first tokens.
    const tokens = batch * (newTokens - 1);
    const runs = [];
    for (let i = 0; i < repeats; i++) {
      const r = await runBatch(engine, Array(batch).fill(decodePrompt), newTokens);
      runs.push(tokens / ((r.end - r.firstAll) / 1e3));
    }
    out.decode.push({ batch, tokens, tokens_per_s: median(runs), runs_tokens_per_s: runs });
  }
  await engine.close();
  return out;
}

function ensureBenchVenv() {
  if (process.env.STRATA_BENCH_PYTHON) return process.env.STRATA_BENCH_PYTHON;
  const venv = join(repo, '.toolchain', 'bench-venv');
  const python = join(venv, 'bin', 'python');
  const ok =
    existsSync(python) &&
    spawnSync(python, ['-c', 'import torch, transformers'], { stdio: 'ignore' }).status === 0;
  if (!ok) {
    console.error(
      '[bench] creating .toolchain/bench-venv with torch and transformers (large download, once)',
    );
    execFileSync('python3', ['-m', 'venv', venv], { stdio: 'inherit' });
    execFileSync(python, ['-m', 'pip', 'install', '--quiet', 'torch', 'transformers', 'safetensors'], {
      stdio: 'inherit',
    });
  }
  return python;
}

function huggingFace() {
  const python = ensureBenchVenv();
  const job = {
    model_dir: modelDir,
    threads,
    repeats,
    decode: { batches, prompt: decodePrompt, new_tokens: newTokens },
    prefill: { prompts: Array.from({ length: prefillCount }, (_, r) => prefillPrompt(r)) },
  };
  const result = spawnSync(python, [join(pkg, 'bench', 'hf_cpu.py')], {
    input: JSON.stringify(job),
    encoding: 'utf8',
  });
  if (result.status !== 0) throw new Error(`hf_cpu.py failed: ${result.stderr}`);
  return JSON.parse(result.stdout.trim().split('\n').at(-1));
}

// The scheduler + block manager alone, 256 running sequences (core/bench/bench_scheduler.cpp).
function schedulerBench() {
  const out = execFileSync(join(pkg, 'build', 'native', 'engine', 'core', 'bench_scheduler'), {
    encoding: 'utf8',
  });
  const number = (re) => Number(re.exec(out)?.[1]);
  return {
    running_sequences: number(/mean running seqs\s+([\d.]+)/),
    mean_us_per_step: number(/wall: mean ([\d.]+)/),
    p99_us_per_step: number(/p99 ([\d.]+)/),
    kv_slot_utilisation: number(/KV slot utilisation\s+([\d.]+)/),
  };
}

const scheduler = schedulerBench();
const ours = await strata();
const hf = values['skip-hf'] ? null : huggingFace();
const rows = [
  ...ours.decode.map((d, i) => ({
    what: `decode, batch ${d.batch}`,
    strata: d.tokens_per_s,
    hf: hf?.decode[i]?.tokens_per_s,
  })),
  { what: `prefill, ${prefillCount} x 256`, strata: ours.prefill.tokens_per_s, hf: hf?.prefill.tokens_per_s },
];
const fmt = (x) => (x === undefined ? '-' : x.toFixed(0));
console.log(
  `\nmodel ${modelDir.split('/').at(-1)}, ${engineThreads} engine threads (HF ${threads}), ${cpus()[0]?.model ?? 'cpu'}, ` +
    `${newTokens} new tokens per request, median of ${repeats} runs each`,
);
console.log(`${'tokens/s'.padEnd(24)} ${'strata'.padStart(10)} ${'hf'.padStart(10)} ${'ratio'.padStart(8)}`);
for (const r of rows) {
  const ratio = r.hf ? `${(r.strata / r.hf).toFixed(1)}x` : '-';
  console.log(
    `${r.what.padEnd(24)} ${fmt(r.strata).padStart(10)} ${fmt(r.hf).padStart(10)} ${ratio.padStart(8)}`,
  );
}
console.log(
  `\nscheduler + block manager, ${scheduler.running_sequences} running: mean ${scheduler.mean_us_per_step} us/step ` +
    `(p99 ${scheduler.p99_us_per_step}; target <= 100), KV slot utilisation ${scheduler.kv_slot_utilisation} (target >= 0.95)`,
);
const outDir = join(repo, 'docs', 'benchmarks');
mkdirSync(outDir, { recursive: true });
writeFileSync(
  join(outDir, 'engine-cpu.json'),
  `${JSON.stringify(
    {
      command: 'STRATA_MODELS_DIR=/path/to/models node services/inference-backend/bench/engine-cpu.mjs',
      date: new Date().toISOString(),
      machine: { cpu: cpus()[0]?.model, threads },
      model: modelDir.split('/').at(-1),
      new_tokens: newTokens,
      repeats,
      engine_threads: engineThreads,
      strata: ours,
      hf,
      scheduler,
      rows,
    },
    null,
    2,
  )}\n`,
);
console.log(`\nwrote ${join('docs', 'benchmarks', 'engine-cpu.json')}`);
