// scripts/summarize-tests.mjs, the last line of `scripts/strata test`, fed real vitest reports of
// broken suites: a suite that breaks in its set-up or at load is a failure, by name, never a skip;
// every skip says why, one line per reason.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);
const summarizer = new URL('../../../scripts/summarize-tests.mjs', import.meta.url).pathname;
const vitestCli = join(require.resolve('vitest/package.json'), '..', 'vitest.mjs');
const roots: string[] = [];
afterAll(() => {
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

const fixtures: Record<string, string> = {
  'passes.test.ts': `import { expect, it } from 'vitest';
it('adds', () => expect(1 + 1).toBe(2));
it.skipIf(true)('needs a model (skipped: tinystories-656k not found: STRATA_MODELS_DIR is not set)', () => {});
it.skipIf(true)('needs another (skipped: tinystories-656k not found: STRATA_MODELS_DIR is not set)', () => {});
it.skipIf(true)('needs redis-server (skipped: redis-server not found: spawn ENOENT)', () => {});`,
  'setup-fails.test.ts': `import { beforeAll, describe, expect, it } from 'vitest';
describe('needs a server', () => {
  beforeAll(() => { throw new Error('could not start the server'); });
  it('one', () => expect(1).toBe(1));
  it('two', () => expect(1).toBe(1));
});`,
  'load-fails.test.ts': `import { it } from 'vitest';
throw new Error('cannot import the module under test');
it('never', () => {});`,
  'unexplained-skip.test.ts': `import { expect, it } from 'vitest';
it('runs', () => expect(true).toBe(true));
it.skip('is skipped without saying why', () => {});`,
};

/** A checkout-shaped root whose one package has run vitest on `files` (really) and ctest (`junit`). */
function checkout(files: string[], junit?: string): string {
  const root = mkdtempSync(join(tmpdir(), 'strata-summary-'));
  roots.push(root);
  const pkg = join(root, 'services', 'demo');
  mkdirSync(join(pkg, 'test'), { recursive: true });
  writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: '@strata/demo', scripts: { test: 'x' } }));
  writeFileSync(join(pkg, 'vitest.config.ts'), 'export default {};\n');
  for (const name of files) writeFileSync(join(pkg, 'test', name), fixtures[name] ?? '');
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('VITEST')));
  const run = spawnSync(
    process.execPath,
    [vitestCli, 'run', '--root', pkg, '--reporter=json', '--outputFile=reports/vitest.json'],
    { cwd: pkg, env, encoding: 'utf8', timeout: 60_000 },
  );
  if (run.status === null) throw new Error(`vitest did not finish: ${run.stderr}`);
  if (junit !== undefined) {
    writeFileSync(join(pkg, 'CMakeLists.txt'), '');
    writeFileSync(join(pkg, 'reports', 'ctest.xml'), junit);
  }
  return root;
}

function summarize(root: string): { status: number | null; lines: string[] } {
  const run = spawnSync(process.execPath, [summarizer, root], { encoding: 'utf8' });
  return { status: run.status, lines: run.stdout.trimEnd().split('\n') };
}

describe('scripts/summarize-tests.mjs', () => {
  it('counts a suite that fails in beforeAll, and one that fails at load, as failed by name', () => {
    const { status, lines } = summarize(
      checkout(['passes.test.ts', 'setup-fails.test.ts', 'load-fails.test.ts']),
    );
    expect(status).toBe(1);
    // 1 passing test; the 2 tests the failed beforeAll kept from running, and the file that
    // failed at load; the 3 skips that give their reason.
    expect(lines.at(-1)).toBe('1 passed, 3 failed, 3 skipped');
    expect(lines).toContain('@strata/demo vitest       1       3        3');
    const failed = lines.slice(lines.indexOf('failed:') + 1);
    expect(failed[0]).toMatch(/test\/(setup|load)-fails\.test\.ts: failed outside its tests/);
    expect(
      lines.some((l) => /setup-fails\.test\.ts: failed outside its tests .*; 2 tests did not run/.test(l)),
    ).toBe(true);
    expect(
      lines.some((l) =>
        /load-fails\.test\.ts: failed outside its tests \(.*cannot import the module/.test(l),
      ),
    ).toBe(true);
  }, 90_000);

  it('prints one line per skip reason, and names a skip that gives none', () => {
    const { status, lines } = summarize(checkout(['passes.test.ts', 'unexplained-skip.test.ts']));
    expect(status).toBe(0);
    expect(lines.at(-1)).toBe('2 passed, 0 failed, 4 skipped');
    const skips = lines.slice(lines.indexOf('skipped, by reason:') + 1, -1).map((l) => l.trim());
    expect(skips).toEqual([
      '2  tinystories-656k not found: STRATA_MODELS_DIR is not set',
      '1  redis-server not found: spawn ENOENT',
      '1  no reason given: test/unexplained-skip.test.ts › is skipped without saying why',
    ]);
  }, 90_000);

  it("reads the C++ executables' own counts and skip lines from ctest JUnit", () => {
    const junit = `<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Linux" tests="3" failures="1">
  <testcase name="test_kv" classname="test_kv" time="0.1" status="run"><system-out>ok   alloc
ok   free
2 passed, 0 failed, 0 skipped
</system-out></testcase>
  <testcase name="test_gguf" classname="test_gguf" time="0.1" status="notrun"><system-out>skip reads SmolLM2: STRATA_SMOLLM2_GGUF is not set
0 passed, 0 failed, 1 skipped
</system-out></testcase>
  <testcase name="test_cuda_emu" classname="test_cuda_emu" time="0.1" status="fail"><system-out>ok   gemm
Segmentation fault
</system-out></testcase>
</testsuite>`;
    const { status, lines } = summarize(checkout(['passes.test.ts'], junit));
    expect(status).toBe(1);
    expect(lines).toContain('@strata/demo ctest        2       1        1');
    expect(lines).toContain('  @strata/demo ctest: test_cuda_emu: failed before printing its summary line');
    expect(lines.some((l) => /^\s+1 {2}STRATA_SMOLLM2_GGUF is not set$/.test(l))).toBe(true);
    expect(lines.at(-1)).toBe('3 passed, 1 failed, 4 skipped');
  }, 90_000);

  it('counts a runner that left no report as a failed suite', () => {
    const root = checkout(['passes.test.ts']);
    writeFileSync(join(root, 'services', 'demo', 'CMakeLists.txt'), '');
    const { status, lines } = summarize(root);
    expect(status).toBe(1);
    expect(lines).toContain(
      '  @strata/demo ctest: no report: the suite did not run to the end (see its output above)',
    );
    expect(lines.at(-1)).toBe('1 passed, 1 failed, 3 skipped');
  }, 90_000);
});
