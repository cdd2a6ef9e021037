// scripts/lib/toolchain.sh's install_step, which every download of the set-up goes through: a
// line saying what and why, progress in MB while it runs, size and time when done, the tool's
// own chatter in a log file, and its last lines plus the log's path when it fails.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stripVTControlCharacters } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const repo = new URL('../../../', import.meta.url).pathname;
const lib = join(repo, 'scripts/lib/toolchain.sh');
const root = mkdtempSync(join(tmpdir(), 'strata-install-step-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Runs `script` in bash after sourcing toolchain.sh with STRATA_ROOT=root; plain-text stderr lines. */
function bash(script: string) {
  const run = spawnSync(
    'bash',
    ['-c', `set -euo pipefail; STRATA_ROOT="${root}"; source "${lib}"; ${script}`],
    {
      encoding: 'utf8',
      env: { ...process.env, STRATA_PROGRESS_EVERY: '1' },
      timeout: 30_000,
    },
  );
  const lines = stripVTControlCharacters(run.stderr).trimEnd().split('\n');
  return { status: run.status, lines };
}

describe('install_step', () => {
  it('says what it installs and why, shows MB while it runs, and size and time when done', () => {
    const { status, lines } = bash(`
      fetch() { echo "chatter that belongs in the log"; mkdir -p "$1"; head -c 3000000 /dev/zero >"$1/a"; sleep 2.5; head -c 2000000 /dev/zero >"$1/b"; }
      install_step "demo 1.0" "the demo tests" "$toolchain_dir/demo" fetch "$toolchain_dir/demo"`);
    expect(status).toBe(0);
    expect(lines[0]).toBe('[strata] demo 1.0: installing, for the demo tests');
    const progress = lines.filter((l) => l.includes('MB so far'));
    expect(progress.length).toBeGreaterThanOrEqual(1);
    for (const line of progress) expect(line).toMatch(/^\[strata\] demo 1\.0: [035] MB so far, \d+ s$/);
    expect(progress).toContainEqual(expect.stringMatching(/: 3 MB so far/));
    expect(lines.at(-1)).toMatch(/^\[strata\] demo 1\.0: done \(5 MB, \d+ s\)$/);
    expect(lines.join('\n')).not.toContain('chatter');
    expect(readFileSync(join(root, '.toolchain/logs/demo-1.0.log'), 'utf8')).toContain(
      'chatter that belongs in the log',
    );
  });

  it('shows the last lines of the log and where it is when the step fails, and stops the script', () => {
    const { status, lines } = bash(`
      broken() { echo "go: downloading example.com/x v1"; echo "go: example.com/x: 404 Not Found"; return 3; }
      install_step "broken 2.0" "nothing" - broken
      echo "not reached" >&2`);
    expect(status).toBe(1);
    expect(lines).toContain('go: example.com/x: 404 Not Found');
    expect(lines.at(-1)).toBe(
      '[strata] error: broken 2.0: install failed (exit 3); whole log: .toolchain/logs/broken-2.0.log',
    );
    expect(existsSync(join(root, '.toolchain/logs/broken-2.0.log'))).toBe(true);
  });
});

describe('check_cuda_mode', () => {
  const cuda = new URL('../../../scripts/lib/cuda.sh', import.meta.url).pathname;
  it('names the values STRATA_CUDA takes when it holds another', () => {
    for (const ok of ['off', 'auto', 'install']) {
      expect(bash(`source "${cuda}"; STRATA_CUDA=${ok} check_cuda_mode`).status).toBe(0);
    }
    const { status, lines } = bash(`source "${cuda}"; STRATA_CUDA=none check_cuda_mode`);
    expect(status).toBe(1);
    expect(lines.at(-1)).toMatch(/STRATA_CUDA=none is not a value it takes: off .*, auto .* or install/);
  });
});

describe('the set-up scripts', () => {
  it("pass shellcheck: scripts/strata, scripts/lib, every package's ensure-*.sh and .ci/run", () => {
    const local = join(repo, '.toolchain', 'shellcheck', 'bin', 'shellcheck');
    const shellcheck = existsSync(local) ? local : 'shellcheck';
    const ensure = [
      'helm',
      'infrastructure',
      'load-testing',
      'services/edge-gateway',
      'services/observability',
    ].flatMap((dir) =>
      readdirSync(join(repo, dir, 'scripts'))
        .filter((f) => /^ensure-.*\.sh$/.test(f))
        .map((f) => join(dir, 'scripts', f)),
    );
    expect(ensure).toContain('load-testing/scripts/ensure-k6.sh');
    const libs = readdirSync(join(repo, 'scripts', 'lib'))
      .filter((f) => f.endsWith('.sh'))
      .map((f) => join('scripts', 'lib', f));
    const r = spawnSync(shellcheck, ['-x', 'scripts/strata', '.ci/run', ...libs, ...ensure], {
      cwd: repo,
      encoding: 'utf8',
    });
    expect(
      r.error,
      'no shellcheck: `scripts/strata test` installs it into .toolchain/shellcheck',
    ).toBeUndefined();
    expect(r.status, r.stdout + r.stderr).toBe(0);
  });
});
