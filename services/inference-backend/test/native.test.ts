import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadNativeAddon } from '../src/native.js';

describe('native addon', () => {
  it('loads and reports its build; a CUDA toolkit at build time means device code is in it', () => {
    const build = loadNativeAddon().buildInfo();
    expect(build.napiVersion).toBe(9);
    expect(build.cuda).toBe(Boolean(process.env.STRATA_CUDA_HOME));
    // Structured output's llguidance is in unless the set-up found no cargo (STRATA_GRAMMAR=off).
    expect(build.grammar).toBe(process.env.STRATA_GRAMMAR !== 'off');
    if (build.grammar) expect(build.llguidance).toMatch(/llguidance@1\.9\.1/);
    if (build.cuda) {
      expect(build.cudaArchs).toBe('80,89,90');
      expect(build.nvcc).toMatch(/^release \d+\.\d+$/);
    }
  });

  it('reports CUDA devices truthfully: a working kernel on a GPU, a clear reason without one', () => {
    const info = loadNativeAddon().cudaInfo();
    if (info.available) {
      expect(info.devices.length).toBeGreaterThan(0);
      expect(info.smokeKernelOk).toBe(true);
    } else {
      expect(info.devices).toEqual([]);
      expect(info.smokeKernelOk).toBe(false);
      expect(info.reason).toMatch(/^no CUDA device: \S/);
    }
  });

  it('builds and loads CPU-only, without nvcc', { timeout: 600_000 }, () => {
    const out = mkdtempSync(join(tmpdir(), 'strata-cpu-only-'));
    const built = spawnSync(
      process.execPath,
      ['scripts/build-native.mjs', '--cpu-only', '--target', 'strata_native', '--out', out],
      {
        encoding: 'utf8',
        env: { ...process.env, STRATA_CUDA_HOME: '' },
      },
    );
    expect(built.status, built.stdout + built.stderr).toBe(0);
    const addon = loadNativeAddon(join(out, 'Release', 'strata_native.node'));
    expect(addon.buildInfo().cuda).toBe(false);
    expect(addon.cudaInfo()).toEqual({
      compiled: false,
      available: false,
      reason: 'no CUDA device: this build of the addon has no CUDA support (built without nvcc)',
      devices: [],
      smokeKernelOk: false,
    });
  });
});
