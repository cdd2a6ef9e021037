// The GPU machine's plan (scripts/device/gpu-plan.sh) tested here, where there is no GPU: its
// dry run executes the real plan (step order, timeouts, the budget, dependencies, prebuilt
// programs, the model cache, what reaches $OUT and when) with every command that needs the GPU,
// the CUDA toolkit or PyTorch printed instead of run. Plus shellcheck over scripts/device/*.sh.
// A device call is scarce (minutes per task, when a task gets one at all): the script must work
// the first time it meets a GPU.
import { execFile, type SpawnSyncReturns, spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';

const repo = resolve(import.meta.dirname, '..', '..', '..');
const plan = join(repo, 'scripts', 'device', 'gpu-plan.sh');
const engineCuda = join(repo, 'services', 'inference-backend', 'native', 'engine', 'cuda');

// The issue's order of value: the GEMM check, the kernel checks, the sampler, the backend against
// the CPU backend, memcheck, the Llama-3-8B logits against transformers, the forward benchmark,
// end to end.
const ORDER = [
  'machine',
  'build',
  'gemm',
  'kernels',
  'quant',
  'sampling',
  'backend',
  'memcheck',
  'llama3',
  'hf_logits',
  'forward',
  'hf_generate',
  'e2e',
];

// The GPU programs as cuda/CMakeLists.txt names them: check_x.cu -> check_cuda_x, bench_x.cu -> bench_cuda_x.
const programs = [
  ...readdirSync(join(engineCuda, 'tests')).filter((f) => /^check_.*\.cu$/.test(f)),
  ...readdirSync(join(engineCuda, 'bench')).filter((f) => /^bench_.*\.cu$/.test(f)),
].map((f) => f.replace(/\.cu$/, '').replace('_', '_cuda_'));

interface StepRecord {
  step: string;
  status: string;
  rc: number | null;
  seconds: number | null;
  timeout_s: number | null;
  note: string;
}

interface PlanJson {
  dry_run: boolean;
  budget_s: number;
  reserve_s: number;
  finished: boolean;
  outer_timeout: boolean;
  selected: string[];
  steps: StepRecord[];
}

const sandboxes: string[] = [];
afterEach(() => {
  for (const dir of sandboxes.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A fake device machine's folders: $OUT, the plan's work folder, the model cache, the build. */
function sandbox(extra: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'strata-gpu-plan-'));
  sandboxes.push(dir);
  mkdirSync(join(dir, 'models', 'tinystories-656k'), { recursive: true });
  // ninja on PATH, so the build must use it.
  mkdirSync(join(dir, 'tools'));
  writeFileSync(join(dir, 'tools', 'ninja'), '#!/bin/sh\necho 1.11.1\n');
  chmodSync(join(dir, 'tools', 'ninja'), 0o755);
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env)) {
    if (key.startsWith('STRATA_PLAN_') || key === 'STRATA_CUDA_ARCH' || key === 'OUT') delete env[key];
  }
  Object.assign(env, {
    OUT: join(dir, 'out'),
    STRATA_PLAN_WORK: join(dir, 'work'),
    STRATA_LLAMA3_CACHE: join(dir, 'cache'),
    STRATA_CUDA_BUILD: join(dir, 'build'),
    STRATA_DEVICE_BIN: join(dir, 'bin'),
    STRATA_MODELS_DIR: join(dir, 'models'),
    STRATA_SERVICE_BUNDLE: join(dir, 'service'),
    PATH: `${join(dir, 'tools')}:${process.env.PATH}`,
    ...extra,
  });
  const out = join(dir, 'out');
  const run = (...args: string[]): SpawnSyncReturns<string> =>
    spawnSync('bash', [plan, ...args], { env, encoding: 'utf8', timeout: 60_000 });
  const planJson = (): PlanJson => JSON.parse(readFileSync(join(out, 'plan.json'), 'utf8'));
  const step = (name: string): StepRecord => {
    const found = planJson().steps.find((s) => s.step === name);
    if (!found) throw new Error(`no record of step ${name}`);
    return found;
  };
  const archived = (): string[] =>
    spawnSync('tar', ['tzf', join(out, 'results.tgz')], { encoding: 'utf8' })
      .stdout.split('\n')
      .filter((f) => f !== '' && f !== './')
      .map((f) => f.replace(/^\.\//, ''));
  const file = (name: string): string =>
    spawnSync('tar', ['xzOf', join(out, 'results.tgz'), `./${name}`], { encoding: 'utf8' }).stdout;
  /** The step's log, from results.tgz (NN-step.log). */
  const log = (name: string): string => {
    const found = archived().find((f) => f.endsWith(`-${name}.log`));
    if (!found) throw new Error(`no log of step ${name}`);
    return file(found);
  };
  return { dir, env, out, run, planJson, step, archived, file, log };
}

/** Each step's timeout as the plan lists it (--list). */
function listedCaps(): Map<string, number> {
  const r = spawnSync('bash', [plan, '--list'], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  const caps = new Map<string, number>();
  for (const line of r.stdout.trim().split('\n')) {
    const m = /^(\S+)\s+(\d+) s/.exec(line);
    if (m) caps.set(m[1] as string, Number(m[2]));
  }
  return caps;
}

/** Every process of a session (a detached spawn is its own): what the device tool's kill reaches. */
function killSession(sid: number) {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    // After "pid (comm) ": state, ppid, pgrp, session.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[3]) !== sid) continue;
    try {
      process.kill(Number(entry), 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

const summaryLines = (text: string) =>
  text.split('\n').filter((l) => /^[a-z0-9_]+ +[a-z-]+ +(\d+|-) /.test(l));

describe('the GPU plan (scripts/device/gpu-plan.sh)', () => {
  it('passes shellcheck', () => {
    const local = join(repo, '.toolchain', 'shellcheck', 'bin', 'shellcheck');
    const shellcheck = existsSync(local) ? local : 'shellcheck';
    const scripts = readdirSync(join(repo, 'scripts', 'device'))
      .filter((f) => f.endsWith('.sh'))
      .map((f) => join('scripts', 'device', f));
    expect(scripts).toContain(join('scripts', 'device', 'gpu-plan.sh'));
    const r = spawnSync(shellcheck, ['-x', ...scripts], { cwd: repo, encoding: 'utf8' });
    expect(
      r.error,
      'no shellcheck: `scripts/strata test` installs it into .toolchain/shellcheck',
    ).toBeUndefined();
    expect(r.status, r.stdout + r.stderr).toBe(0);
  });

  it('runs every step in order of value, each under its own timeout, inside an outer timeout under 600 s, summary last', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run');
    expect(r.status, r.stdout + r.stderr).toBe(0);

    const json = sb.planJson();
    expect(json.dry_run).toBe(true);
    expect(json.budget_s).toBeLessThan(600);
    expect(json.budget_s).toBeLessThanOrEqual(570);
    expect(json.finished).toBe(true);
    expect(json.outer_timeout).toBe(false);
    expect(json.selected).toEqual(ORDER);
    expect(json.steps.map((s) => s.step)).toEqual(ORDER);
    const caps = listedCaps();
    for (const s of json.steps) {
      expect(s.status, `${s.step}: ${s.note}`).toBe('ok');
      expect(s.rc).toBe(0);
      // Its own timeout, the one the plan lists, and one that fits in the budget.
      expect(s.timeout_s, s.step).toBe(caps.get(s.step));
      expect(s.timeout_s, s.step).toBeGreaterThan(0);
      expect(s.timeout_s as number, s.step).toBeLessThanOrEqual(json.budget_s - json.reserve_s);
    }

    // Each step's log and status in results.tgz, numbered in the plan's order.
    const files = sb.archived();
    ORDER.forEach((name, i) => {
      const prefix = `${String(i + 1).padStart(2, '0')}-${name}`;
      expect(files).toContain(`${prefix}.log`);
      expect(files).toContain(`${prefix}.step.json`);
      const record = JSON.parse(sb.file(`${prefix}.step.json`)) as StepRecord;
      expect(record).toMatchObject({ step: name, status: 'ok', rc: 0, timeout_s: caps.get(name) });
    });
    expect(readFileSync(join(sb.out, 'summary.txt'), 'utf8')).toBe(sb.file('summary.txt'));

    // The summary comes last: a header, one line per step in order, the totals.
    const tail = r.stdout
      .trimEnd()
      .split('\n')
      .slice(-(ORDER.length + 2));
    expect(tail[0]).toMatch(/^step +status +rc +time +timeout +notes$/);
    expect(tail.slice(1, -1).map((l) => l.split(/ +/).slice(0, 2))).toEqual(ORDER.map((s) => [s, 'ok']));
    expect(tail.at(-1)).toMatch(
      /^gpu-plan: 13 steps: 13 ok, 0 failed, 0 timed out, 0 skipped, 0 not run; \d+ s of the 540 s budget/,
    );

    // The build: ninja, this GPU's arch only, the GPU programs only (not the emulation).
    const build = sb.log('build');
    expect(build).toMatch(/dry-run: cmake -S services\/inference-backend\/native\/engine -B \S+ -G Ninja /);
    expect(build).toContain('-DSTRATA_CUDA_ARCHS=90 ');
    const targets = /dry-run: cmake --build \S+ -j \d+ --target (.*)/.exec(build)?.[1]?.split(' ');
    expect(targets?.sort()).toEqual([...programs].sort());
    expect(build).not.toContain('emu_');

    // What each step runs.
    const bin = join(sb.dir, 'build', 'cuda');
    expect(sb.log('gemm')).toContain(`dry-run: ${bin}/check_cuda_gemm\n`);
    expect(sb.log('kernels')).toContain(`dry-run: ${bin}/check_cuda_kernels\n`);
    expect(sb.log('quant')).toContain(`dry-run: ${bin}/check_cuda_quant\n`);
    expect(sb.log('sampling')).toContain(`dry-run: ${bin}/check_cuda_sampling\n`);
    expect(sb.log('backend')).toContain(
      `${bin}/check_cuda_backend ${join(sb.dir, 'models', 'tinystories-656k')}`,
    );
    expect(sb.log('memcheck')).toMatch(
      /compute-sanitizer --tool memcheck --error-exitcode 3 \S+\/check_cuda_kernels/,
    );
    const model = /llama3_random\.py (\S+)\.partial --layers 32 --key [0-9a-f]{16}/.exec(
      sb.log('llama3'),
    )?.[1];
    expect(model).toMatch(new RegExp(`^${join(sb.dir, 'cache')}/llama3-[0-9a-f]{16}$`));
    expect(sb.log('hf_logits')).toContain(`${bin}/check_cuda_hf_logits ${model}\n`);
    expect(sb.log('forward')).toContain(`${bin}/bench_cuda_forward ${model} `);
    expect(sb.log('hf_generate')).toContain(`scripts/device/hf_generate.py ${model} `);
    expect(sb.log('e2e')).toContain(`${bin}/bench_cuda_e2e ${model} `);
  });

  it("builds for the GPU's own arch, as nvidia-smi reports it", () => {
    const sb = sandbox({ STRATA_PLAN_DRY_COMPUTE_CAP: '8.9' });
    const r = sb.run('--dry-run', 'build');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build']);
    expect(sb.log('build')).toContain('-DSTRATA_CUDA_ARCHS=89 ');
  });

  it("writes each step's files into $OUT as it ends: a kill mid-plan keeps every finished step", async () => {
    const sb = sandbox({ STRATA_PLAN_DRY_HANG: 'sampling', STRATA_PLAN_DRY_HANG_S: '30' });
    const child = spawn('bash', [plan, '--dry-run'], { env: sb.env, detached: true, stdio: 'ignore' });
    const sid = child.pid as number;
    try {
      // Wait until sampling hangs: its command printed into running.log (the build step's log
      // names check_cuda_sampling too, as a target: not that line).
      const running = join(sb.out, 'running.log');
      const started = Date.now();
      const sampling = /^dry-run: \S+\/check_cuda_sampling\b/m;
      while (!(existsSync(running) && sampling.test(readFileSync(running, 'utf8')))) {
        expect(Date.now() - started, 'the plan never reached sampling').toBeLessThan(20_000);
        await new Promise((done) => setTimeout(done, 100));
      }
    } finally {
      killSession(sid); // as the device tool does at its limit: no EXIT trap, no clean-up runs
    }
    const done = ORDER.slice(0, ORDER.indexOf('sampling'));
    expect(
      summaryLines(readFileSync(join(sb.out, 'summary.txt'), 'utf8')).map((l) => l.split(/ +/)[0]),
    ).toEqual(done);
    const files = sb.archived();
    done.forEach((name, i) => {
      expect(files).toContain(`${String(i + 1).padStart(2, '0')}-${name}.log`);
      expect(files).toContain(`${String(i + 1).padStart(2, '0')}-${name}.step.json`);
    });
    expect(files.some((f) => f.includes('sampling'))).toBe(false);
    const json = sb.planJson();
    expect(json.finished).toBe(false);
    expect(json.steps.map((s) => s.step)).toEqual(done);
    // The running step's log so far is in $OUT too.
    expect(readFileSync(join(sb.out, 'running.log'), 'utf8')).toContain('check_cuda_sampling');
  });

  it('cuts a step at its own timeout and goes on with the next', () => {
    const sb = sandbox({ STRATA_PLAN_DRY_HANG: 'machine' });
    const r = sb.run('--dry-run', '--cap', 'machine=2');
    expect(r.status).toBe(1);
    expect(sb.step('machine')).toMatchObject({ status: 'timeout', rc: 124, timeout_s: 2 });
    expect(sb.step('machine').seconds).toBeLessThan(10);
    for (const name of ORDER.slice(1)) expect(sb.step(name).status, name).toBe('ok');
    expect(r.stdout).toMatch(/^machine +timeout +124 +\d+ s +2 s +over its 2 s timeout/m);
  });

  it('skips the steps a failed step was needed for, and runs the others', () => {
    const sb = sandbox({ STRATA_PLAN_DRY_FAIL: 'build' });
    const r = sb.run('--dry-run');
    expect(r.status).toBe(1);
    expect(sb.step('build')).toMatchObject({ status: 'failed', rc: 1 });
    const runWithoutBuild = ['machine', 'llama3', 'hf_generate'];
    for (const name of ORDER.filter((s) => s !== 'build' && !runWithoutBuild.includes(s))) {
      expect(sb.step(name), name).toMatchObject({
        status: 'skipped',
        rc: null,
        note: 'needs build (failed)',
      });
    }
    for (const name of runWithoutBuild) expect(sb.step(name).status, name).toBe('ok');
  });

  it('does not start a step the rest of the budget cannot hold, and says where to go on', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run', '--budget', '40');
    expect(r.status).toBe(1);
    expect(sb.planJson().budget_s).toBe(40);
    // 40 s less the 15 s reserve, less the second or so the plan took to get there
    expect(sb.step('machine').status).toBe('ok');
    expect(sb.step('machine').timeout_s).toBeLessThanOrEqual(25);
    expect(sb.step('machine').timeout_s).toBeGreaterThanOrEqual(23);
    expect(sb.step('build').status).toBe('no-time');
    expect(sb.step('llama3').status).toBe('no-time');
    expect(r.stdout.trimEnd().split('\n').at(-1)).toBe(
      'the rest, in the next call while this machine is warm: bash scripts/device/gpu-plan.sh --from build',
    );
  });

  it('ends a step that outlasts the outer timeout, keeps its log, and still prints the summary', () => {
    // A negative reserve lets the step's own timeout run past the outer one.
    const sb = sandbox({
      STRATA_PLAN_RESERVE: '-10',
      STRATA_PLAN_DRY_HANG: 'llama3',
      STRATA_PLAN_DRY_HANG_S: '30',
    });
    const started = Date.now();
    const r = sb.run('--dry-run', '--budget', '3', '--cap', 'llama3=8', 'llama3', 'hf_generate');
    expect(Date.now() - started).toBeLessThan(11_000);
    expect(r.status).toBe(1);
    const json = sb.planJson();
    expect(json.outer_timeout).toBe(true);
    expect(json.steps.map((s) => [s.step, s.status])).toEqual([
      ['machine', 'ok'],
      ['llama3', 'killed'],
      ['hf_generate', 'not-run'],
    ]);
    expect(readFileSync(join(sb.out, 'running.log'), 'utf8')).toContain('llama3_random.py');
    expect(sb.log('llama3')).toContain('llama3_random.py');
    const tail = r.stdout.trimEnd().split('\n');
    expect(tail.at(-2)).toMatch(/^gpu-plan: 3 steps: 1 ok, 0 failed, 1 timed out, 0 skipped, 1 not run;/);
    expect(tail.at(-1)).toContain('--from llama3');
  });

  it('uses prebuilt programs when they match the sources and this GPU, and builds otherwise', () => {
    const sb = sandbox();
    const bin = join(sb.dir, 'bin');
    const staged = join(sb.dir, 'staged');
    mkdirSync(bin);
    mkdirSync(staged);
    // Real ELF programs, so that ldd has something to read; the dry run does not start them.
    const pack = (names: string[]) => {
      for (const p of names) copyFileSync('/bin/true', join(staged, p));
      const r = spawnSync('tar', ['-cJf', join(bin, 'programs.tar.xz'), '-C', staged, ...names]);
      expect(r.status).toBe(0);
    };
    pack(programs);
    const hash = spawnSync('bash', [plan, '--source-hash'], { encoding: 'utf8' }).stdout.trim();
    expect(hash).toMatch(/^[0-9a-f]{16}$/);
    const manifest = (sources: string, archs: string) =>
      writeFileSync(
        join(bin, 'manifest.txt'),
        `sources ${sources}\narchs ${archs}\nnvcc release 13.0\nprograms ${programs.join(' ')}\n`,
      );

    manifest(hash, '90');
    expect(sb.run('--dry-run', 'build', 'gemm').status).toBe(0);
    expect(sb.step('build').note).toMatch(/^prebuilt /);
    expect(sb.log('build')).not.toContain('cmake');
    expect(sb.log('gemm')).toContain(`dry-run: ${join(sb.dir, 'work', 'prebuilt')}/check_cuda_gemm\n`);

    manifest(hash, '80');
    expect(sb.run('--dry-run', 'build').status).toBe(0);
    expect(sb.step('build').note).toMatch(
      /^built here \(prebuilt programs are for sm_80, this GPU is sm_90\)/,
    );
    expect(sb.log('build')).toContain('cmake --build');

    manifest('0123456789abcdef', '90');
    expect(sb.run('--dry-run', 'build').status).toBe(0);
    expect(sb.step('build').note).toMatch(/^built here \(prebuilt programs in \S+ are of other sources/);

    manifest(hash, '90');
    pack(programs.filter((p) => p !== 'check_cuda_quant'));
    expect(sb.run('--dry-run', 'build').status).toBe(0);
    expect(sb.step('build').note).toMatch(
      /^built here \(prebuilt check_cuda_quant missing from \S+programs\.tar\.xz/,
    );
  });

  it('reuses the random Llama-3 model while its manifest checks, and makes it again otherwise', () => {
    const sb = sandbox();
    const key = spawnSync('bash', [plan, '--llama3-key'], { encoding: 'utf8' }).stdout.trim();
    expect(key).toMatch(/^[0-9a-f]{16}$/);
    const cache = join(sb.dir, 'cache');
    const model = join(cache, `llama3-${key}`);
    const files: Record<string, number> = {
      'config.json': 2,
      'model.safetensors': 64,
      'prompts.bin': 12,
      'logits.bin': 32,
      'logits_fp32.bin': 32,
    };
    const make = (listed: string[]) => {
      mkdirSync(model, { recursive: true });
      for (const [name, size] of Object.entries(files))
        writeFileSync(join(model, name), Buffer.alloc(size, 1));
      const lines = listed.map((name) => `${files[name]} ${name}`);
      writeFileSync(join(model, 'manifest.txt'), `key ${key}\n${lines.join('\n')}\n`);
    };
    mkdirSync(join(cache, 'llama3-0000000000000000'), { recursive: true }); // another script's model

    make(Object.keys(files));
    expect(sb.run('--dry-run', 'llama3').status).toBe(0);
    expect(sb.step('llama3').note).toBe(`reused ${model}`);
    expect(sb.log('llama3')).not.toContain('llama3_random.py');

    writeFileSync(join(model, 'logits_fp32.bin'), Buffer.alloc(31)); // cut short
    expect(sb.run('--dry-run', 'llama3').status).toBe(0);
    expect(sb.step('llama3').note).toBe(`would be made into ${model}`);
    expect(sb.log('llama3')).toContain(`llama3_random.py ${model}.partial --layers 32 --key ${key}`);
    expect(existsSync(model)).toBe(false);
    expect(existsSync(join(cache, 'llama3-0000000000000000'))).toBe(false); // one 16 GB model at a time

    make(Object.keys(files).filter((f) => f !== 'logits_fp32.bin')); // made before the fp32 reference
    expect(sb.run('--dry-run', 'llama3').status).toBe(0);
    expect(sb.step('llama3').note).toBe(`would be made into ${model}`);
  });

  it('profiles one step per phase under ncu, when named', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run', 'profile');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build', 'llama3', 'profile']);
    const lines = sb
      .log('profile')
      .split('\n')
      .filter((l) => l.startsWith('dry-run: ncu '));
    expect(lines.map((l) => /--profile (\S+)/.exec(l)?.[1])).toEqual(['decode:1', 'decode:64', 'prefill']);
    for (const line of lines) {
      expect(line).toContain('--profile-from-start off');
      expect(line).toContain('--graph-profiling node');
      expect(line).toContain('--clock-control none');
      expect(line).toMatch(/bench_cuda_forward \S+llama3-[0-9a-f]{16} /);
    }
  });

  it('profiles decode steps of the Q4_0 GGUF copy under ncu, when named', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run', 'profile_gguf');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build', 'llama3', 'profile_gguf']);
    const log = sb.log('profile_gguf');
    const made =
      /dry-run: python3 scripts\/device\/llama3_gguf\.py \S+llama3-[0-9a-f]{16} (\S+-Q4_0-[0-9a-f]{8}\.gguf)\.part --type Q4_0\n/.exec(
        log,
      );
    expect(made, log).not.toBeNull();
    const lines = log.split('\n').filter((l) => l.startsWith('dry-run: ncu '));
    expect(lines.map((l) => /--profile (\S+)/.exec(l)?.[1])).toEqual(['decode:1', 'decode:64']);
    for (const line of lines) {
      expect(line).toContain('--graph-profiling node');
      expect(line).toContain(`bench_cuda_forward ${made?.[1]} --profile`);
    }
  });

  it('profiles the first kernels of Q4_0 decode and bf16 prefill steps against the limits, when named', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run', 'limits');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build', 'llama3', 'limits']);
    const log = sb.log('limits');
    const made =
      /llama3_gguf\.py \S+llama3-[0-9a-f]{16} (\S+-Q4_0-[0-9a-f]{8}\.gguf)\.part --type Q4_0\n/.exec(log);
    expect(made, log).not.toBeNull();
    const model = /llama3_random\.py (\S+)\.partial /.exec(sb.log('llama3'))?.[1] as string;
    const lines = log.split('\n').filter((l) => l.startsWith('dry-run: ncu '));
    expect(lines.map((l) => /bench_cuda_forward (\S+) --profile (\S+)/.exec(l)?.slice(1))).toEqual([
      [made?.[1], 'decode:1'],
      [made?.[1], 'decode:64'],
      [model, 'prefill'],
    ]);
    const sections = [
      'SpeedOfLight',
      'LaunchStats',
      'Occupancy',
      'SchedulerStats',
      'WarpStateStats',
      'ComputeWorkloadAnalysis',
      'MemoryWorkloadAnalysis',
    ];
    const csvs = ['Q4_0.decode-1', 'Q4_0.decode-64', 'bf16.prefill'];
    lines.forEach((line, i) => {
      for (const flag of ['--profile-from-start off', '--graph-profiling node', '--clock-control none'])
        expect(line).toContain(flag);
      expect(line).toContain('--launch-count 14 ');
      expect(line).toMatch(/ --copy-mib 64 --gemm-n 1024 --graphs 0$/); // eager decode steps: plain launches to replay
      expect(line).toContain('--page raw --csv --print-units base ');
      expect(line).toContain(`--log-file ${join(sb.dir, 'work', 'results', `29-limits.${csvs[i]}.csv`)} `);
      expect([...line.matchAll(/--section (\S+)/g)].map((m) => m[1])).toEqual(sections);
      // printf %q escapes the regex's bars
      expect(line).toContain(
        '--kernel-name regex:quant_\\|gemv\\|nvjet\\|decode_\\|prefill_\\|rope_\\|silu_\\|add_rms ',
      );
    });

    // Other phases and kernels through the environment; an unknown model type is refused.
    const narrow = sandbox({
      STRATA_LIMITS_PHASES: 'bf16:decode:1',
      STRATA_LIMITS_KERNELS: 'gemv',
      STRATA_LIMITS_COUNT: '4',
    });
    expect(narrow.run('--dry-run', 'limits').status).toBe(0);
    const only = narrow
      .log('limits')
      .split('\n')
      .filter((l) => l.startsWith('dry-run: ncu '));
    expect(only).toHaveLength(1);
    expect(only[0]).toContain('--kernel-name regex:gemv --launch-count 4 ');
    expect(only[0]).toMatch(/bench_cuda_forward \S+llama3-[0-9a-f]{16} --profile decode:1 /);
    // A phase that fails (here every command of the step) does not stop the next ones.
    const failing = sandbox({ STRATA_PLAN_DRY_FAIL: 'limits' });
    expect(failing.run('--dry-run', 'limits').status).toBe(1);
    expect(failing.step('limits')).toMatchObject({
      status: 'failed',
      note: 'Q4_0:decode:1: no Q4_0 file; Q4_0:decode:64: no Q4_0 file; bf16:prefill: ncu or the profiled step failed',
    });
    expect(failing.log('limits')).toMatch(/dry-run: ncu .* --profile prefill /);
    const bad = sandbox({ STRATA_LIMITS_PHASES: 'fp8:decode:1' });
    expect(bad.run('--dry-run', 'limits').status).toBe(1);
    expect(bad.step('limits').status).toBe('failed');
    expect(bad.log('limits')).toContain('limits: no model type fp8 in fp8:decode:1 (bf16, Q4_0 or Q8_0)');
  });

  it('times the GEMV kernel against cuBLAS at 1 to 8 rows, when named', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run', 'gemv');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build', 'llama3', 'gemv']);
    expect(sb.log('gemv')).toMatch(
      /dry-run: \S+\/bench_cuda_forward \S+llama3-[0-9a-f]{16} \S+-gemv\.json --gemv-rows 8 --batches 1\\?,2\\?,4\\?,8 --prefill-seqs 2\n/, // %q escapes the commas
    );
  });

  it('times decode steps with programmatic launch against without, when named', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run', 'programmatic');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build', 'llama3', 'programmatic']);
    expect(sb.log('programmatic')).toMatch(
      /dry-run: \S+\/bench_cuda_forward \S+llama3-[0-9a-f]{16} \S+-programmatic\.json --programmatic 1 --batches 1\\?,2\\?,8\\?,64 --prefill-seqs 2\n/,
    );
  });

  it('checks and times GGUF copies of the models, when named', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run', 'gguf');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build', 'llama3', 'gguf']);
    const log = sb.log('gguf');
    const cache = join(sb.dir, 'cache');
    const tiny = join(cache, 'tinystories-656k-Q4_0.gguf');
    expect(log).toContain(
      `dry-run: python3 scripts/device/llama3_gguf.py ${join(sb.dir, 'models', 'tinystories-656k')} ${tiny} --type Q4_0\n`,
    );
    expect(log).toContain(`/check_cuda_backend ${tiny}\n`);
    for (const type of ['Q4_0', 'Q8_0']) {
      const file = new RegExp(`(\\S+llama3-[0-9a-f]{16}-${type}-[0-9a-f]{8}\\.gguf)`);
      const made = new RegExp(
        `dry-run: python3 scripts/device/llama3_gguf\\.py \\S+llama3-[0-9a-f]{16} ${file.source}\\.part --type ${type}\n`,
      ).exec(log);
      expect(made, log).not.toBeNull();
      expect(log).toMatch(
        new RegExp(
          `/bench_cuda_forward ${made?.[1]} \\S+-gguf-${type}\\.json --batches 1\\\\?,8\\\\?,64 --prefill-seqs 2\n`,
        ),
      );
    }
    expect(log).toMatch(
      /\/bench_cuda_forward \S+llama3-[0-9a-f]{16}-Q4_0-[0-9a-f]{8}\.gguf \S+-gguf-Q4_0-tiled\.json --batches 1 --prefill-seqs 2 --quant-dense-rows 0\n/,
    );
    expect(log).toMatch(
      /\/bench_cuda_load \S+llama3-[0-9a-f]{16}-Q4_0-[0-9a-f]{8}\.gguf \S+-gguf-load-Q4_0\.json --runs 3\n/,
    );
    expect(sb.step('gguf').status).toBe('ok');
  });

  it('times the load from bf16 safetensors and from an F16 GGUF copy, then deletes the copy, when named', () => {
    const sb = sandbox();
    const r = sb.run('--dry-run', 'load');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build', 'llama3', 'load']);
    const log = sb.log('load');
    const lines = log.split('\n').filter((l) => l.startsWith('dry-run: '));
    expect(lines[0]).toMatch(/\/bench_cuda_load \S+llama3-[0-9a-f]{16} \S+-load-bf16\.json --runs 3$/);
    const made =
      /^dry-run: python3 scripts\/device\/llama3_gguf\.py \S+llama3-[0-9a-f]{16} (\S+-F16-[0-9a-f]{8}\.gguf)\.part --type F16$/.exec(
        lines[1] ?? '',
      );
    expect(made, log).not.toBeNull();
    expect(lines[2]).toBe(`dry-run: mv ${made?.[1]}.part ${made?.[1]}`);
    expect(lines[3]).toMatch(new RegExp(`/bench_cuda_load ${made?.[1]} \\S+-load-F16\\.json --runs 3$`));
    expect(lines[4]).toBe(`dry-run: rm -f ${made?.[1]}`);
    expect(sb.step('load').status).toBe('ok');
  });

  it('sums ncu durations by kernel and class (ncu_summary.py)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'strata-ncu-'));
    sandboxes.push(dir);
    // Lines of a real `ncu --csv --print-units base` log of a batch-1 decode step on an H200:
    // ncu's messages, then one quoted row per kernel, durations in ns with thousands separators.
    const csv = join(dir, '14-profile.decode-1.csv');
    copyFileSync(join(import.meta.dirname, 'fixtures', 'ncu-decode-1.csv'), csv);
    const r = spawnSync(
      'python3',
      [join(repo, 'scripts', 'device', 'ncu_summary.py'), join(dir, 'out.json'), csv],
      {
        encoding: 'utf8',
      },
    );
    expect(r.status, r.stderr).toBe(0);
    const phase = JSON.parse(readFileSync(join(dir, 'out.json'), 'utf8')).phases[0];
    expect(phase.phase).toBe('decode-1');
    expect(phase.kernels).toBe(6);
    expect(phase.total_us).toBeCloseTo(138.048, 6);
    expect(phase.by_class_us.gemm).toBeCloseTo(58.656, 6);
    expect(phase.by_class_us.attention).toBeCloseTo(39.84, 6);
    expect(phase.by_class_us.sampling).toBeCloseTo(16.288, 6);
    expect(phase.by_class_us.other).toBeCloseTo(23.264, 6);
    expect(phase.by_kernel[1]).toMatchObject({
      kernel: 'decode_partition_kernel<__nv_bfloat16, 128, 4>',
      class: 'attention',
      count: 2,
    });
    expect(r.stdout).toMatch(/^decode-1: 6 kernels, 138 us of kernel time \(gemm 59 us, attention 40 us, /m);
  });

  it("reads each kernel's limits from ncu's raw page or its details page (ncu_limits.py)", () => {
    const dir = mkdtempSync(join(tmpdir(), 'strata-ncu-'));
    sandboxes.push(dir);
    // Written here, not from a GPU: ncu's CSV shapes (messages first, quoted rows, thousands
    // separators, the raw page's row of units) with raw metric names of its sections.
    const fixed = ['ID', 'Process ID', 'Process Name', 'Host Name', 'Kernel Name', 'Context', 'Stream'];
    const gemv =
      'void strata::cuda::<unnamed>::quant_gemv_kernel<0, __nv_bfloat16, 1, 1>(strata::cuda::<unnamed>::Params<T2>)';
    const norm =
      'void strata::<unnamed>::add_rms_norm_kernel<__nv_bfloat16>(float *, const T1 *, const T1 *, T1 *, int, float)';
    const kernels: [string, string, Record<string, string>][] = [
      [
        '3',
        gemv,
        {
          'gpu__time_duration.sum': '14,592',
          launch__grid_size: '384',
          launch__block_size: '192',
          launch__registers_per_thread: '64',
          launch__waves_per_multiprocessor: '0.48',
          'dram__throughput.avg.pct_of_peak_sustained_elapsed': '31.5',
          'sm__throughput.avg.pct_of_peak_sustained_elapsed': '22.25',
          'l1tex__throughput.avg.pct_of_peak_sustained_active': '40.1',
          'lts__throughput.avg.pct_of_peak_sustained_elapsed': '35',
          'dram__bytes_read.sum': '14,155,776',
          'dram__bytes_write.sum': '12,288',
          'sm__warps_active.avg.pct_of_peak_sustained_active': '17.9',
          sm__maximum_warps_per_active_cycle_pct: '37.5',
          'sm__inst_issued.avg.pct_of_peak_sustained_active': '9.6',
          'smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio': '21.4',
          'smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio': '3.2',
          'smsp__average_warps_issue_stalled_wait_per_issue_active.ratio': '1.1',
          'smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio': '0.4',
          'smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio': '0.2',
          'smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio': '0',
          'smsp__average_warps_issue_stalled_long_scoreboard_not_issued_per_issue_active.ratio': '99',
          'sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active': '6.5',
          'sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active': '4.75',
          'sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active': '7',
          'sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active': '3',
        },
      ],
      [
        '1',
        norm,
        {
          'gpu__time_duration.sum': '4,608',
          launch__registers_per_thread: '30',
          'sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active': 'n/a',
        },
      ],
    ];
    const names = [...new Set(kernels.flatMap(([, , m]) => Object.keys(m)))];
    const quoted = (cells: string[]) => cells.map((c) => `"${c}"`).join(',');
    const messages =
      '==PROF== Connected to process 1 (bench_cuda_forward)\n==PROF== Profiling "quant_gemv_kernel": 0%....50%....100% - 38 passes\n';
    const raw = [
      quoted([...fixed, ...names]),
      quoted([...fixed.map(() => ''), ...names.map((n) => (n.endsWith('.sum') ? 'ns' : '%'))]),
      ...kernels.map(([id, name, m]) =>
        quoted([
          id,
          '7',
          'bench_cuda_forward',
          '127.0.0.1',
          name,
          '1',
          '13',
          ...names.map((n) => m[n] ?? ''),
        ]),
      ),
    ].join('\n');
    const details = [
      quoted([...fixed, 'Section Name', 'Metric Name', 'Metric Unit', 'Metric Value']),
      ...kernels.flatMap(([id, name, m]) =>
        Object.entries(m).map(([k, v]) =>
          quoted([id, '7', 'bench_cuda_forward', '127.0.0.1', name, '1', '13', 'x', k, '', v]),
        ),
      ),
    ].join('\n');
    const summarise = (csvs: Record<string, string>) => {
      const paths = Object.entries(csvs).map(([file, text]) => {
        writeFileSync(join(dir, file), `${messages}${text}\n`);
        return join(dir, file);
      });
      const r = spawnSync(
        'python3',
        [join(repo, 'scripts', 'device', 'ncu_limits.py'), join(dir, 'out.json'), ...paths],
        {
          encoding: 'utf8',
        },
      );
      return {
        r,
        json: r.status === 2 ? undefined : JSON.parse(readFileSync(join(dir, 'out.json'), 'utf8')),
      };
    };

    const { r, json } = summarise({
      '29-limits.Q4_0.decode-1.csv': raw,
      '29-limits.bf16.prefill.csv': details,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(json.phases.map((p: { phase: string }) => p.phase)).toEqual(['Q4_0.decode-1', 'bf16.prefill']);
    for (const phase of json.phases) {
      // Profiling order (the IDs), whichever page.
      expect(phase.kernels.map((k: { kernel: string }) => k.kernel)).toEqual([
        'add_rms_norm_kernel<__nv_bfloat16>',
        'quant_gemv_kernel<0, __nv_bfloat16, 1, 1>',
      ]);
      const [n, g] = phase.kernels;
      expect(g).toMatchObject({
        class: 'gemm',
        duration_ns: 14592,
        grid: 384,
        block: 192,
        registers: 64,
        waves_per_sm: 0.48,
        dram_pct: 31.5,
        sm_pct: 22.25,
        memory_pct: null, // not in this CSV
        occupancy_achieved_pct: 17.9,
        occupancy_theoretical_pct: 37.5,
        issue_slots_busy_pct: 9.6,
        // the largest four; zeros and the *_not_issued twins left out
        stalls: [
          ['long_scoreboard', 21.4],
          ['barrier', 3.2],
          ['wait', 1.1],
          ['math_pipe_throttle', 0.4],
        ],
        pipes_pct: [
          ['alu', 7],
          ['tensor_op_hmma', 6.5],
          ['lsu', 4.75],
        ],
      });
      expect(g.dram_gb_per_s).toBeCloseTo((14155776 + 12288) / 14592, 9);
      expect(n).toMatchObject({
        class: 'other',
        duration_ns: 4608,
        registers: 30,
        dram_gb_per_s: null,
        stalls: [],
        pipes_pct: [],
      });
    }
    expect(r.stdout).toMatch(/^Q4_0\.decode-1: 2 kernels$/m);
    expect(r.stdout).toMatch(
      /^quant_gemv_kernel<0, __nv_bfloat16, 1, 1> +384 +192 +64 +14\.6 +32 +971 +22 +40 +35 +18\/38 +10 {2}alu:7 tensor_op_hmma:6 lsu:5; long_scoreboard:21\.4 barrier:3\.2 wait:1\.1 math_pipe_throttle:0\.4$/m,
    );

    // A phase with no kernels (the regex matched none, or the step never ran) fails the step.
    const empty = summarise({ '29-limits.Q4_0.decode-64.csv': quoted([...fixed, 'gpu__time_duration.sum']) });
    expect(empty.r.status).toBe(1);
    expect(empty.r.stdout).toContain(
      '(no kernels: did the profiled step run, and does the kernel regex match?)',
    );
    expect(summarise({}).r.status).toBe(2);
  });

  it("counts each kernel's main loop in a SASS listing (sass_loops.py)", () => {
    const dir = mkdtempSync(join(tmpdir(), 'strata-sass-'));
    sandboxes.push(dir);
    // Written here in cuobjdump -sass's shape: an inner loop without HMMA inside the main one,
    // a forward branch, a predicated instruction, and a function the pattern leaves out.
    const ins = (address: number, text: string) =>
      `        /*${address.toString(16).padStart(4, '0')}*/                   ${text} ;  /* 0x000000000000 */`;
    const listing = [
      '\tcode for sm_90',
      '\t\tFunction : _ZN6strata4cuda12quant_tiled_kernelILi0EEEvv',
      ins(0x00, 'MOV R1, c[0x0][0x28]'),
      ins(0x10, 'IMAD R2, R3, R4, RZ'), // main loop head
      ins(0x20, 'LDG.E.128 R8, desc[UR4][R2.64]'),
      ins(0x30, 'IADD3 R5, R5, 0x1, RZ'), // inner loop head
      ins(0x40, '@P1 BRA 0x30'), // inner loop, no HMMA
      ins(0x50, 'HMMA.16816.F32.BF16 R12, R8, R10, RZ'),
      ins(0x60, 'HMMA.16816.F32.BF16 R16, R8, R11, RZ'),
      ins(0x70, '@!P0 FFMA R20, R12, R6, R20'),
      ins(0x80, '@P2 BRA 0xa0'), // forward
      ins(0x90, 'LOP3.LUT R21, R21, 0xf, RZ, 0xc0, !PT'),
      ins(0xa0, '@!P3 BRA 0x10'), // the main loop's back edge
      ins(0xb0, 'EXIT'),
      '\t\tFunction : _ZN6strata4cuda12other_kernelEv',
      ins(0x00, 'HMMA.16816.F32.BF16 R12, R8, R10, RZ'),
      ins(0x10, 'BRA 0x0'),
    ].join('\n');
    const file = join(dir, 'k.sass');
    writeFileSync(file, `${listing}\n`);
    const script = join(repo, 'scripts', 'device', 'sass_loops.py');
    const r = spawnSync('python3', [script, file, 'quant_'], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe(
      '_ZN6strata4cuda12quant_tiled_kernelILi0EEEvv\n' +
        '  loop 10 instructions, 2 HMMA, 5.0 per HMMA; BRA:3 HMMA:2 IMAD:1 LDG:1 IADD3:1 FFMA:1 LOP3:1\n',
    );
    // Every function when the pattern is empty; none: exit 1.
    expect(spawnSync('python3', [script, file, ''], { encoding: 'utf8' }).stdout).toContain(
      'other_kernelEv\n  loop 2 ',
    );
    const none = spawnSync('python3', [script, file, 'nothing'], { encoding: 'utf8' });
    expect(none.status).toBe(1);
    expect(none.stderr).toContain('no function with a loop of HMMA matches');
  });

  it("files a call's results into the benchmark record (record_run.py): steps, checks, every benchmark's JSON", () => {
    const dir = mkdtempSync(join(tmpdir(), 'strata-record-'));
    sandboxes.push(dir);
    const results = join(dir, 'results');
    mkdirSync(results);
    const put = (name: string, value: unknown) => writeFileSync(join(results, name), JSON.stringify(value));
    put('00-machine.json', { name: 'NVIDIA H100 80GB HBM3', driver: '580.159.04' });
    put('00-machine.step.json', { step: 'machine', status: 'ok', seconds: 9 });
    put('01-quant.step.json', { step: 'quant', status: 'ok', seconds: 16 });
    put('01-quant.json', { program: 'check_cuda_quant', seed: 7, rows: [{ pass: true }, { pass: false }] });
    put('02-forward.step.json', { step: 'forward', status: 'ok', seconds: 30 });
    put('02-forward.json', {
      benchmark: 'cuda-forward',
      stage_times: [{ step: 'prefill', gpu_span_ms: 205 }],
    });
    put('03-bench_quant.step.json', { step: 'bench_quant', status: 'ok', seconds: 40 });
    put('03-bench_quant.json', {
      program: 'bench_cuda_quant',
      gemv_warp_sweep: [{ warps_asked: 0, prefetch_asked: 2 }],
    });
    put('04-gguf.step.json', { step: 'gguf', status: 'ok', seconds: 70 });
    put('04-gguf-load-Q4_0.json', { benchmark: 'cuda-load', load_s: { median: 2.5, min: 2.4, max: 2.7 } });
    put('05-load.step.json', { step: 'load', status: 'ok', seconds: 90 });
    put('05-load-bf16.json', { benchmark: 'cuda-load', load_s: { median: 2.1, min: 2.0, max: 2.2 } });
    put('05-load-F16.json', { benchmark: 'cuda-load', load_s: { median: 2.3, min: 2.2, max: 2.4 } });
    const out = join(dir, 'cuda-test.json');
    const script = join(repo, 'scripts', 'device', 'record_run.py');
    const args = [
      script,
      results,
      out,
      '--commit',
      'abc1234',
      '--command',
      'gpu-plan.sh quant forward bench_quant',
    ];
    const r = spawnSync('python3', args, { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const run = JSON.parse(readFileSync(out, 'utf8')).runs[0];
    expect(run.commit).toBe('abc1234');
    expect(run.steps.bench_quant).toEqual({ status: 'ok', seconds: 40, note: '' });
    expect(run.checks).toEqual([
      { step: 'quant', program: 'check_cuda_quant', checks: 2, failed: 1, seed: '7' },
    ]);
    expect(run.forward.stage_times[0].gpu_span_ms).toBe(205);
    expect(run.bench_quant.gemv_warp_sweep[0].prefetch_asked).toBe(2);
    expect(run.gguf_load_Q4_0.load_s.median).toBe(2.5);
    expect(run.load_bf16.load_s.median).toBe(2.1);
    expect(run.load_F16.load_s.median).toBe(2.3);
    // A second call appends a run; a folder without the machine step is refused.
    expect(spawnSync('python3', args, { encoding: 'utf8' }).status).toBe(0);
    expect(JSON.parse(readFileSync(out, 'utf8')).runs).toHaveLength(2);
    const empty = join(dir, 'empty');
    mkdirSync(empty);
    const refused = spawnSync('python3', [script, empty, out, '--commit', 'c', '--command', 'x'], {
      encoding: 'utf8',
    });
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toContain('not a gpu-plan results folder');
  });

  it('runs the service from its bundle when named: the engine alone on the same workload, then service-run.sh', () => {
    const sb = sandbox();
    const bundle = join(sb.dir, 'service');
    mkdirSync(bundle);
    const hash = spawnSync('bash', [plan, '--service-hash'], { encoding: 'utf8' }).stdout.trim();
    expect(hash).toMatch(/^[0-9a-f]{16}$/);
    const manifest = (sources: string, archs: string) =>
      writeFileSync(
        join(bundle, 'manifest.txt'),
        `sources ${sources}\narchs ${archs}\nnvcc release 13.0\nnode v24.21.0\n`,
      );

    manifest(hash, '90');
    const r = sb.run('--dry-run', 'service');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(sb.planJson().selected).toEqual(['machine', 'build', 'llama3', 'service']);
    expect(sb.step('service')).toMatchObject({ status: 'ok', rc: 0, timeout_s: listedCaps().get('service') });
    const log = sb.log('service');
    const model = /llama3_random\.py (\S+)\.partial /.exec(sb.log('llama3'))?.[1] as string;
    const base = join(sb.dir, 'work', 'results', '23-service');
    // The engine alone first, on the workload the service gets: 64 requests of 1,024 + 128 tokens.
    const engine = `dry-run: ${join(sb.dir, 'build', 'cuda')}/bench_cuda_e2e ${model} ${base}.engine.json --requests 64 --prompt 1024 --output 128\n`;
    expect(log).toContain(engine);
    // Then the service on the CUDA backend, from the bundle, and the HTTP latency benchmark at 256
    // streams on tinystories-656k (CPU backend) and on the service's model (CUDA backend, with one
    // event loop and then with 4 and 8).
    const service =
      `dry-run: bash scripts/device/service-run.sh --bundle ${bundle} --backend cuda --model ${model} --out ${base} ` +
      `--streams 64 --prompt 1024 --max-tokens 128 --engine-json ${base}.engine.json --ready-timeout 150 ` +
      `--latency-model ${join(sb.dir, 'models', 'tinystories-656k')} --latency-streams 256 --latency-cuda-streams 256 ` +
      // (the dry run prints the words as printf %q quotes them)
      '--latency-http-workers 4\\,8\n';
    expect(log).toContain(service);
    expect(log.indexOf(engine)).toBeLessThan(log.indexOf(service));

    // A bundle of other sources, or for another arch, is refused; no bundle skips the step.
    manifest('0123456789abcdef', '90');
    expect(sb.run('--dry-run', 'service').status).toBe(1);
    expect(sb.step('service')).toMatchObject({ status: 'failed', rc: 1 });
    expect(sb.step('service').note).toMatch(
      /^the service bundle is of other sources \(0123456789abcdef, here [0-9a-f]{16}\)/,
    );
    expect(sb.log('service')).not.toContain('service-run.sh');

    manifest(hash, '80');
    expect(sb.run('--dry-run', 'service').status).toBe(1);
    expect(sb.step('service').note).toBe("the service bundle's addon is for sm_80, this GPU is sm_90");

    rmSync(bundle, { recursive: true });
    expect(sb.run('--dry-run', 'service').status).toBe(1);
    expect(sb.step('service')).toMatchObject({ status: 'skipped', rc: 77 });
    expect(sb.step('service').note).toMatch(/^no service bundle in \S+: carry \.device-service/);
  });

  it('refuses a budget the device tool would cut, and unknown steps', () => {
    const sb = sandbox();
    for (const args of [
      ['--budget', '600'],
      ['--budget', '571'],
      ['--budget', 'ten'],
      ['gpu'],
      ['--cap', 'gemm'],
    ]) {
      const r = sb.run('--dry-run', ...args);
      expect(r.status, args.join(' ')).toBe(2);
    }
    expect(existsSync(join(sb.out, 'plan.json'))).toBe(false);
  });
});

// The load client against the real backend on tinystories-656k (vocabulary 512): what it
// reports must be what the backend did, by its own /metrics.
const tiny = optionalModel('tinystories-656k');

describe.skipIf(!tiny.path)(
  `the service step's load client (scripts/device/service-load.mjs)${tiny.skipped}`,
  () => {
    const flags = (options: Record<string, string | number>) =>
      Object.entries(options).flatMap(([name, value]) => [`--${name}`, String(value)]);
    const load = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((done) => {
        execFile(
          process.execPath,
          [join(repo, 'scripts', 'device', 'service-load.mjs'), ...args],
          { encoding: 'utf8', timeout: 60_000 },
          (err, stdout, stderr) => done({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
        );
      });
    const outDir = () => {
      const dir = mkdtempSync(join(tmpdir(), 'strata-service-load-'));
      sandboxes.push(dir);
      return dir;
    };

    it('streams in waves and reports TTFT, ITL, tokens/s and the /metrics difference', async () => {
      const backend = await startBackend({ STRATA_MODEL_DIR: tiny.path as string, STRATA_WARMUP: 'false' });
      try {
        const out = join(outDir(), 'load.json');
        const r = await load(
          flags({ url: backend.url, out, streams: 3, requests: 6, prompt: 16, 'max-tokens': 12, vocab: 512 }),
        );
        expect(r.code, r.stdout + r.stderr).toBe(0);
        const report = JSON.parse(readFileSync(out, 'utf8'));
        expect(report).toMatchObject({ completed: 6, failed: 0, output_tokens: 6 * 12 });
        expect(report.workload).toMatchObject({ streams: 3, requests: 6, prompt_tokens: 16, max_tokens: 12 });
        expect(report.client.itl_ms.samples).toBe(6 * 11);
        // tinystories-656k is fast: tokens of one step can reach the client in one read (ITL 0).
        expect(report.client.ttft_ms.p50).toBeGreaterThan(0);
        for (const q of [report.client.ttft_ms, report.client.itl_ms])
          expect(q.p99).toBeGreaterThanOrEqual(q.p50);
        expect(report.output_tokens_per_s).toBeGreaterThan(0);
        // The backend's own counters moved by exactly this run's requests and tokens.
        expect(report.server_metrics.ttft.count).toBe(6);
        expect(report.server_metrics.generation_tokens).toBe(6 * 12);
        expect(report.server_metrics.prompt_tokens).toBe(6 * 16);
        expect(report.server_metrics.ttft.p50_ms).toBeGreaterThan(0);
        expect(report.server_metrics.running_peak).toBeLessThanOrEqual(3);
        expect(report.server_metrics.kv_cache_usage_peak).toBeLessThanOrEqual(1);
        expect(r.stdout).toMatch(
          /^service load: 6 requests, 3 concurrent streams, 16 prompt \+ 12 output tokens each: 6 completed, 0 failed/m,
        );
      } finally {
        await backend.close();
      }
    });

    it('counts a refused stream as failed and exits 1', async () => {
      // One running and none queued: the second of two concurrent streams is refused while the
      // first runs (400 tokens).
      const backend = await startBackend({
        STRATA_MODEL_DIR: tiny.path as string,
        STRATA_WARMUP: 'false',
        STRATA_MAX_NUM_SEQS: '1',
        STRATA_MAX_QUEUED: '0',
      });
      try {
        const out = join(outDir(), 'load.json');
        const r = await load(
          flags({ url: backend.url, out, streams: 2, prompt: 8, 'max-tokens': 400, vocab: 512 }),
        );
        expect(r.code).toBe(1);
        const report = JSON.parse(readFileSync(out, 'utf8'));
        expect(report).toMatchObject({ completed: 1, failed: 1 });
        expect(report.failures[0]).toMatchObject({ status: 429, tokens: 0 });
        expect(r.stdout).toMatch(/STRATA_\w+/);
      } finally {
        await backend.close();
      }
    });
  },
);
