#!/usr/bin/env node
// Benchmark: the CPU backend's fp32 kernel sets against each other on one model, interleaved.
// Each round runs bench_cpu_forward (the backend alone: decode steps at several batch sizes,
// then prefill) once per set, each in its own process with STRATA_CPU_KERNELS naming the set,
// the order alternating between rounds, so every set sees the same machine.
//   node services/inference-backend/bench/cpu-kernels.mjs --model DIR [--sets avx2,best]
//     [--rounds 3] [--batches 1,8,32] [--steps 16] [--threads N] [--no-prefill]
//     [--prefill-repeats N] [--out FILE]
// `best` is what the CPU picks by itself (avx512f where it has AVX-512F); `amx` the AMX set
// (bf16 checkpoints, on a CPU with AMX; elsewhere it names the best set). Prints, per phase and
// batch, each set's median ms a step (min-max over the rounds) and the ratio of each round's
// pair (the second set over the first), and writes the runs into docs/benchmarks/cpu-kernels.json.
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { pkg, repo } from './paths.mjs';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    sets: { type: 'string', default: 'avx2,best' },
    rounds: { type: 'string', default: '3' },
    batches: { type: 'string', default: '1,8,32' },
    steps: { type: 'string', default: '16' },
    threads: { type: 'string' },
    'no-prefill': { type: 'boolean', default: false },
    'prefill-repeats': { type: 'string' },
    bench: { type: 'string', default: join(pkg, 'build', 'native', 'engine', 'model', 'bench_cpu_forward') },
    out: { type: 'string', default: join(repo, 'docs', 'benchmarks', 'cpu-kernels.json') },
  },
});
if (!values.model) {
  console.error('cpu-kernels: --model DIR is required (a safetensors or GGUF model)');
  process.exit(2);
}
if (!existsSync(values.bench)) {
  console.error(
    `cpu-kernels: ${values.bench} is missing; build the engine first (bash scripts/strata setup)`,
  );
  process.exit(2);
}
const sets = values.sets.split(',');
const rounds = Number(values.rounds);
if (sets.length < 1 || !Number.isInteger(rounds) || rounds < 1) {
  console.error('cpu-kernels: --sets needs one or more names and --rounds a positive integer');
  process.exit(2);
}
const args = [
  '--model',
  resolve(values.model),
  '--steps',
  values.steps,
  '--batches',
  values.batches,
  '--json',
];
if (values.threads) args.push('--threads', values.threads);
if (values['no-prefill']) args.push('--no-prefill');
if (values['prefill-repeats']) args.push('--prefill-repeats', values['prefill-repeats']);

/** One bench_cpu_forward process with the set forced; its JSON line. */
function runOnce(set) {
  const env = { ...process.env };
  if (set === 'best') delete env.STRATA_CPU_KERNELS;
  else env.STRATA_CPU_KERNELS = set;
  const started = Date.now();
  const child = spawnSync(values.bench, args, { env, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (child.status !== 0) {
    console.error(child.stdout, child.stderr);
    throw new Error(`bench_cpu_forward (${set}) exited ${child.status}`);
  }
  const lines = child.stdout.trim().split('\n');
  const result = JSON.parse(lines[lines.length - 1]);
  process.stderr.write(`  ${set} (${result.kernels}): ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
  return result;
}

const runs = [];
for (let round = 1; round <= rounds; ++round) {
  const order = round % 2 === 1 ? sets : [...sets].reverse();
  process.stderr.write(`round ${round} of ${rounds}: ${order.join(', ')}\n`);
  for (const set of order) {
    const { model: _path, ...result } = runOnce(set); // the model's path stays out of the JSON
    runs.push({ set, round, ...result });
  }
}

const key = (r) => `${r.phase} ${r.batch}x${r.tokens_per_step / r.batch}`;
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fmt = (x) => x.toFixed(x < 100 ? 1 : 0);
const kinds = [...new Set(runs[0].results.map(key))];
const isa = Object.fromEntries(sets.map((s) => [s, runs.find((r) => r.set === s).kernels]));
const header = ['ms a step', ...sets.map((s) => `${s} (${isa[s]})`)];
if (sets.length === 2) header.push(`${sets[1]} / ${sets[0]}, per round`);
const rows = [header];
const table = [];
for (const kind of kinds) {
  const times = Object.fromEntries(
    sets.map((s) => [
      s,
      runs.filter((r) => r.set === s).map((r) => r.results.find((x) => key(x) === kind).ms_per_step),
    ]),
  );
  const row = [kind.replace(/x1$/, '').replace(/^decode (\d+)$/, 'decode, $1 seq')];
  const entry = { kind };
  for (const s of sets) {
    row.push(`${fmt(median(times[s]))} (${fmt(Math.min(...times[s]))}-${fmt(Math.max(...times[s]))})`);
    entry[s] = { median: median(times[s]), min: Math.min(...times[s]), max: Math.max(...times[s]) };
  }
  if (sets.length === 2) {
    const ratios = times[sets[1]].map((t, i) => t / times[sets[0]][i]);
    row.push(`${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)}`);
    entry.ratio = { min: Math.min(...ratios), max: Math.max(...ratios) };
  }
  rows.push(row);
  table.push(entry);
}
const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
for (const r of rows) console.log(r.map((cell, c) => cell.padStart(widths[c])).join('  '));

const cpu = cpus()[0]?.model ?? 'unknown';
writeFileSync(
  values.out,
  `${JSON.stringify(
    {
      benchmark: 'cpu-kernels',
      model: resolve(values.model).split('/').pop(),
      cpu,
      cores: cpus().length,
      threads: runs[0].threads,
      sets: isa,
      command: `node services/inference-backend/bench/cpu-kernels.mjs --model DIR --sets ${values.sets} --rounds ${rounds} --batches ${values.batches} --steps ${values.steps}${values['no-prefill'] ? ' --no-prefill' : ''}${values['prefill-repeats'] ? ` --prefill-repeats ${values['prefill-repeats']}` : ''}`,
      table,
      runs,
    },
    null,
    1,
  )}\n`,
);
console.log(`wrote ${values.out}`);
