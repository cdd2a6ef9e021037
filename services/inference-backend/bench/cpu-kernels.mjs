#!/usr/bin/env node
// Benchmark: the CPU backend's kernel sets against each other on one model, or one model in
// several formats (a bf16 checkpoint and its AWQ/GPTQ copies), interleaved. Each round runs
// bench_cpu_forward (the backend alone: decode steps at several batch sizes, then prefill) once
// per variant (each model with each set), each in its own process with STRATA_CPU_KERNELS
// naming the set, the order alternating between rounds, so every variant sees the same machine.
//   node services/inference-backend/bench/cpu-kernels.mjs --model DIR[,DIR...] [--sets avx2,best]
//     [--rounds 3] [--batches 1,8,32] [--steps 16] [--threads N] [--no-prefill]
//     [--prefill-repeats N] [--out FILE]
// `best` is what the CPU picks by itself (avx512f where it has AVX-512F); `amx` the AMX set
// (bf16 checkpoints, on a CPU with AMX; elsewhere it names the best set). Prints, per phase and
// batch, each variant's median ms a step (min-max over the rounds) and, per round, each later
// variant's time over the first's, and writes the runs into docs/benchmarks/cpu-kernels.json.
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { pkg, repo } from './paths.mjs';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    sets: { type: 'string' },
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
  console.error('cpu-kernels: --model DIR is required (a safetensors or GGUF model, or several: A,B)');
  process.exit(2);
}
const models = values.model.split(',').map((m) => resolve(m));
// One model: the sets avx2 and best by default; several: the best set on each.
const sets = (values.sets ?? (models.length > 1 ? 'best' : 'avx2,best')).split(',');
if (!existsSync(values.bench)) {
  console.error(
    `cpu-kernels: ${values.bench} is missing; build the engine first (bash scripts/strata setup)`,
  );
  process.exit(2);
}
const rounds = Number(values.rounds);
if (sets.length < 1 || !Number.isInteger(rounds) || rounds < 1) {
  console.error('cpu-kernels: --sets needs one or more names and --rounds a positive integer');
  process.exit(2);
}
const base = (m) => m.split('/').pop();
/** Every model with every set; named by what differs. */
const variants = models.flatMap((model) =>
  sets.map((set) => ({
    model,
    set,
    name: [models.length > 1 ? base(model) : '', sets.length > 1 ? set : ''].filter(Boolean).join(' ') || set,
  })),
);
const args = ['--steps', values.steps, '--batches', values.batches, '--json'];
if (values.threads) args.push('--threads', values.threads);
if (values['no-prefill']) args.push('--no-prefill');
if (values['prefill-repeats']) args.push('--prefill-repeats', values['prefill-repeats']);

/** One bench_cpu_forward process on the variant's model with its set forced; its JSON line. */
function runOnce({ model, set, name }) {
  const env = { ...process.env };
  if (set === 'best') delete env.STRATA_CPU_KERNELS;
  else env.STRATA_CPU_KERNELS = set;
  const started = Date.now();
  const child = spawnSync(values.bench, ['--model', model, ...args], {
    env,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  if (child.status !== 0) {
    console.error(child.stdout, child.stderr);
    throw new Error(`bench_cpu_forward (${name}) exited ${child.status}`);
  }
  const lines = child.stdout.trim().split('\n');
  const result = JSON.parse(lines[lines.length - 1]);
  process.stderr.write(`  ${name} (${result.kernels}): ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
  return result;
}

const runs = [];
for (let round = 1; round <= rounds; ++round) {
  const order = round % 2 === 1 ? variants : [...variants].reverse();
  process.stderr.write(`round ${round} of ${rounds}: ${order.map((v) => v.name).join(', ')}\n`);
  for (const v of order) {
    const { model: _path, ...result } = runOnce(v); // the model's path stays out of the JSON
    runs.push({ variant: v.name, set: v.set, model: base(v.model), round, ...result });
  }
}

const key = (r) => `${r.phase} ${r.batch}x${r.tokens_per_step / r.batch}`;
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fmt = (x) => x.toFixed(x < 100 ? 1 : 0);
const kinds = [...new Set(runs[0].results.map(key))];
const names = variants.map((v) => v.name);
const isa = Object.fromEntries(names.map((n) => [n, runs.find((r) => r.variant === n).kernels]));
const header = ['ms a step', ...names.map((n) => `${n} (${isa[n]})`)];
for (const n of names.slice(1)) header.push(`${n} / ${names[0]}, per round`);
const rows = [header];
const table = [];
for (const kind of kinds) {
  const times = Object.fromEntries(
    names.map((n) => [
      n,
      runs.filter((r) => r.variant === n).map((r) => r.results.find((x) => key(x) === kind).ms_per_step),
    ]),
  );
  const row = [kind.replace(/x1$/, '').replace(/^decode (\d+)$/, 'decode, $1 seq')];
  const entry = { kind };
  for (const n of names) {
    row.push(`${fmt(median(times[n]))} (${fmt(Math.min(...times[n]))}-${fmt(Math.max(...times[n]))})`);
    entry[n] = { median: median(times[n]), min: Math.min(...times[n]), max: Math.max(...times[n]) };
  }
  entry.ratio = {};
  for (const n of names.slice(1)) {
    const ratios = times[n].map((t, i) => t / times[names[0]][i]);
    row.push(`${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)}`);
    entry.ratio[n] = { min: Math.min(...ratios), max: Math.max(...ratios) };
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
      model: models.map(base).join(','),
      cpu,
      cores: cpus().length,
      threads: runs[0].threads,
      variants: isa,
      command: `node services/inference-backend/bench/cpu-kernels.mjs --model ${models.length > 1 ? models.map((_, i) => `DIR${i + 1}`).join(',') : 'DIR'} --sets ${sets.join(',')} --rounds ${rounds} --batches ${values.batches} --steps ${values.steps}${values['no-prefill'] ? ' --no-prefill' : ''}${values['prefill-repeats'] ? ` --prefill-repeats ${values['prefill-repeats']}` : ''}`,
      table,
      runs,
    },
    null,
    1,
  )}\n`,
);
console.log(`wrote ${values.out}`);
