#!/usr/bin/env node
// Benchmark: Strata's CPU engine against llama.cpp's own C++ (llama-batched-bench) on the same
// GGUF file, side by side, interleaved: for each repeat and thread count the two run one after
// the other (the order alternates), each in its own process, so both see the same machine.
//   node services/inference-backend/bench/gguf-cpu.mjs --llama-bench PATH/llama-batched-bench
//     [--model FILE.gguf] [--threads 1,2] [--npl 1,8,32,128] [--pp 128] [--tg 128] [--repeats 3]
//     [--max-batched-tokens 2048] [--kv-cache-dtype auto|float32|float16]
// Each side: for each count of parallel sequences (npl), npl distinct random prompts of pp tokens
// are prefilled together, then each sequence generates tg tokens. Prefill tokens/s =
// npl * pp / prefill time; decode tokens/s = tokens after the prefill / decode time. Strata's
// times include its scheduler, sampling and the N-API hand-off; llama-batched-bench decodes
// random tokens with no sampling. Peak resident memory (VmHWM) per process; Strata's runs in
// Node, whose own baseline (measured in the same run) is reported beside it.
// Prints a table (median and min-max over the repeats) and writes docs/benchmarks/gguf-cpu.json.
// llama-batched-bench: tools/llama-cpp-build.sh builds it from the llama.cpp source that
// node-llama-cpp carries on the npm registry.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { defaultGguf, pkg, repo } from './paths.mjs';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: defaultGguf },
    'llama-bench': {
      type: 'string',
      default: join(repo, '.toolchain', 'llama-cpp', 'build', 'bin', 'llama-batched-bench'),
    },
    threads: { type: 'string', default: '1,2' },
    npl: { type: 'string', default: '1,8,32,128' },
    pp: { type: 'string', default: '128' },
    tg: { type: 'string', default: '128' },
    repeats: { type: 'string', default: '3' },
    // Strata's token budget per engine step (STRATA_MAX_NUM_BATCHED_TOKENS): its step buffers' size.
    'max-batched-tokens': { type: 'string', default: '2048' },
    // Strata's KV cache (STRATA_KV_CACHE_DTYPE): auto is f16 for this GGUF, as llama.cpp's default.
    'kv-cache-dtype': { type: 'string', default: 'auto' },
    child: { type: 'string' },
    out: { type: 'string', default: join(repo, 'docs', 'benchmarks', 'gguf-cpu.json') },
  },
});
const model = resolve(values.model);
const npls = values.npl.split(',').map(Number);
const pp = Number(values.pp);
const tg = Number(values.tg);

const status = (field) =>
  Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0) * 1024;
const peakRss = () => status('VmHWM');

// ---- the Strata side, in a child process -------------------------------------------------------
async function strataChild(threads) {
  const { Engine } = await import(join(pkg, 'dist/engine/engine.js'));
  const maxSeqs = Math.max(...npls);
  const blocksPerSeq = Math.ceil((pp + tg) / 16);
  const engine = await Engine.load({
    modelDir: model,
    threads,
    numBlocks: maxSeqs * blocksPerSeq + 16,
    maxNumSeqs: maxSeqs,
    maxNumBatchedTokens: Number(values['max-batched-tokens']),
    maxModelLen: pp + tg + 16,
    kvCacheDtype: values['kv-cache-dtype'],
  });
  const kvBytes = engine.info.engine.kvBytesPerBlock * (maxSeqs * blocksPerSeq + 16);
  let seed = 1;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed;
  };
  const prompt = () => Array.from({ length: pp }, () => 17 + (random() % 49000));
  const params = { temperature: 0, maxTokens: tg, ignoreEos: true };
  const runs = [];
  await Promise.all([engine.generate(prompt(), { ...params, maxTokens: 4 })].map(drain)); // warm-up
  for (const npl of npls) {
    const start = performance.now();
    let firsts = 0;
    let allFirst = 0;
    await Promise.all(
      Array.from({ length: npl }, async () => {
        let n = 0;
        for await (const e of engine.generate(prompt(), params)) {
          if (e.token !== undefined && ++n === 1 && ++firsts === npl) allFirst = performance.now();
        }
      }),
    );
    const end = performance.now();
    runs.push({
      npl,
      t_pp: (allFirst - start) / 1e3,
      speed_pp: (npl * pp) / ((allFirst - start) / 1e3),
      t_tg: (end - allFirst) / 1e3,
      speed_tg: (npl * (tg - 1)) / ((end - allFirst) / 1e3),
    });
  }
  const rss = status('VmRSS'); // after the runs: the model, the KV pool and Node, loading's copies gone
  await engine.close();
  process.stdout.write(
    `${JSON.stringify({ runs, peak_rss: peakRss(), rss, kv_bytes: kvBytes, info: engine.info })}\n`,
  );
}

async function drain(stream) {
  for await (const _ of stream);
}

// Node with the engine module loaded, no model: the runtime's own share of Strata's RSS.
async function baselineChild() {
  await import(join(pkg, 'dist/engine/engine.js'));
  process.stdout.write(`${JSON.stringify({ peak_rss: peakRss() })}\n`);
}

if (values.child === 'strata') {
  await strataChild(Number(values.threads));
  process.exit(0);
}
if (values.child === 'baseline') {
  await baselineChild();
  process.exit(0);
}

// ---- the parent --------------------------------------------------------------------------------
function runStrata(threads) {
  const r = spawnSync(
    process.execPath,
    [
      fileURLToPath(import.meta.url),
      '--child',
      'strata',
      '--threads',
      String(threads),
      '--model',
      model,
      '--npl',
      values.npl,
      '--pp',
      String(pp),
      '--tg',
      String(tg),
      '--max-batched-tokens',
      values['max-batched-tokens'],
      '--kv-cache-dtype',
      values['kv-cache-dtype'],
    ],
    { encoding: 'utf8', maxBuffer: 1 << 26 },
  );
  if (r.status !== 0) throw new Error(`strata child failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1));
}

// llama-batched-bench with its peak RSS polled from /proc while it runs.
function runLlama(threads) {
  const maxSeqs = Math.max(...npls);
  const args = [
    '-m',
    model,
    '-c',
    String(maxSeqs * (pp + tg)),
    '-b',
    '2048',
    '-ub',
    '512',
    '-npp',
    String(pp),
    '-ntg',
    String(tg),
    '-npl',
    values.npl,
    '-t',
    String(threads),
    '-tb',
    String(threads),
    '--output-format',
    'jsonl',
    '-fa',
    'auto',
  ];
  return new Promise((resolvePromise, reject) => {
    const child = spawn(values['llama-bench'], args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    let peak = 0;
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    const poll = setInterval(() => {
      try {
        peak = Math.max(
          peak,
          Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 0) * 1024,
        );
      } catch {}
    }, 20);
    child.on('exit', (code) => {
      clearInterval(poll);
      if (code !== 0) return reject(new Error(`llama-batched-bench exited ${code}: ${err.slice(-2000)}`));
      const runs = out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l));
      resolvePromise({
        runs: runs.map((r) => ({
          npl: r.pl,
          t_pp: r.t_pp,
          speed_pp: r.speed_pp,
          t_tg: r.t_tg,
          speed_tg: r.speed_tg,
        })),
        peak_rss: peak,
      });
    });
  });
}

if (!existsSync(values['llama-bench'])) {
  console.error(
    `no llama-batched-bench at ${values['llama-bench']}: build it with services/inference-backend/tools/llama-cpp-build.sh or pass --llama-bench`,
  );
  process.exit(2);
}
const threadCounts = values.threads.split(',').map(Number);
const repeats = Number(values.repeats);
const results = { strata: {}, llama: {} };
const baseline = JSON.parse(
  spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--child', 'baseline'], { encoding: 'utf8' })
    .stdout,
);
for (let r = 0; r < repeats; r++) {
  for (const t of threadCounts) {
    const order = r % 2 === 0 ? ['strata', 'llama'] : ['llama', 'strata'];
    for (const side of order) {
      const started = performance.now();
      const res = side === 'strata' ? runStrata(t) : await runLlama(t);
      results[side][t] = [...(results[side][t] ?? []), res];
      console.error(
        `[bench] repeat ${r + 1}/${repeats}, ${t} thread(s), ${side}: ${((performance.now() - started) / 1e3).toFixed(1)} s`,
      );
    }
  }
}

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { median: s[Math.floor(s.length / 2)], min: s[0], max: s.at(-1), runs: xs };
};
const fileBytes = statSync(model).size;
const rows = [];
for (const t of threadCounts) {
  for (const what of ['tg', 'pp']) {
    for (const npl of npls) {
      const pick = (side) =>
        stats(results[side][t].map((res) => res.runs.find((x) => x.npl === npl)?.[`speed_${what}`] ?? NaN));
      const s = pick('strata');
      const l = pick('llama');
      rows.push({
        threads: t,
        what: what === 'tg' ? 'decode' : 'prefill',
        npl,
        strata: s,
        llama: l,
        ratio: s.median / l.median,
        ratio_range: [s.min / l.max, s.max / l.min],
      });
    }
  }
}
const mem = (side, t) => stats(results[side][t].map((res) => res.peak_rss));
const steady = (t) => stats(results.strata[t].map((res) => res.rss));
const mib = (b) => (b / 2 ** 20).toFixed(0);
console.log(
  `\n${basename(model)} (${mib(fileBytes)} MiB), prompt ${pp}, ${tg} generated per sequence, ${cpus()[0]?.model ?? 'cpu'}; median of ${repeats} (min-max)`,
);
console.log(
  `${'threads'.padEnd(8)}${'tokens/s'.padEnd(18)}${'strata'.padStart(22)}${'llama.cpp'.padStart(22)}${'ratio'.padStart(24)}`,
);
const cell = (s) => `${s.median.toFixed(0)} (${s.min.toFixed(0)}-${s.max.toFixed(0)})`;
for (const r of rows) {
  console.log(
    `${String(r.threads).padEnd(8)}${`${r.what}, ${r.npl} seq`.padEnd(18)}${cell(r.strata).padStart(22)}${cell(r.llama).padStart(22)}${`${r.ratio.toFixed(2)}x (${r.ratio_range[0].toFixed(2)}-${r.ratio_range[1].toFixed(2)})`.padStart(24)}`,
  );
}
const kv = results.strata[threadCounts[0]][0].kv_bytes;
for (const t of threadCounts) {
  console.log(
    `peak RSS, ${t} thread(s): strata ${mib(mem('strata', t).median)} MiB (Node alone ${mib(baseline.peak_rss)} MiB, KV pool ${mib(kv)} MiB), llama.cpp ${mib(mem('llama', t).median)} MiB; file ${mib(fileBytes)} MiB`,
  );
}
const held = steady(threadCounts[0]).median - baseline.peak_rss - kv;
console.log(
  `strata's RSS after the runs ${mib(steady(threadCounts[0]).median)} MiB; less Node's baseline and the KV pool: ${mib(held)} MiB = ${(held / fileBytes).toFixed(2)}x the file`,
);
writeFileSync(
  values.out,
  `${JSON.stringify(
    {
      command: 'node services/inference-backend/bench/gguf-cpu.mjs',
      date: new Date().toISOString(),
      machine: { cpu: cpus()[0]?.model, cores: cpus().length },
      model: basename(model),
      file_bytes: fileBytes,
      pp,
      tg,
      npl: npls,
      repeats,
      node_baseline_rss: baseline.peak_rss,
      max_batched_tokens: Number(values['max-batched-tokens']),
      strata_kv_bytes: kv,
      rows,
      memory: Object.fromEntries(
        threadCounts.map((t) => [
          t,
          { strata_peak: mem('strata', t), strata_after_runs: steady(t), llama_peak: mem('llama', t) },
        ]),
      ),
      raw: results,
    },
    null,
    1,
  )}\n`,
);
console.log(`wrote ${values.out}`);
