import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createLogger, createMetrics } from '@strata/common';
import { describe, expect, it } from 'vitest';
import { GpuCollector } from '../src/gpu/collector.js';
import { registerGpuMetrics } from '../src/gpu/metrics.js';
import { fakeNvidiaSmiDir, printingNvidiaSmi } from './support/fake-nvidia-smi.js';

function collector(nvidiaSmi: string, timeoutMs = 5_000) {
  const lines: string[] = [];
  const logger = createLogger({
    service: 'observability',
    destination: { write: (line: string) => void lines.push(line) },
  });
  let errors = 0;
  const gpu = new GpuCollector({ nvidiaSmi, timeoutMs, logger, onError: () => errors++ });
  const metrics = createMetrics('observability', { defaultMetrics: false });
  registerGpuMetrics(metrics.registry, gpu);
  return { gpu, lines, errors: () => errors, text: () => metrics.registry.metrics() };
}

describe('GpuCollector', () => {
  it('runs in no-GPU mode on this machine when nvidia-smi is not installed, logging it once', async () => {
    // The real lookup: a PATH-resolved name that no package on a CPU machine provides.
    const c = collector('nvidia-smi-not-installed-here');
    await c.gpu.poll();
    await c.gpu.poll();
    expect(c.gpu.mode).toBe('no_gpu');
    expect(c.gpu.up).toBe(false);
    expect(c.errors()).toBe(0);
    expect(c.lines.filter((l) => l.includes('no GPU'))).toHaveLength(1);
    const text = await c.text();
    expect(text).toContain('strata_sidecar_gpus{service="observability"} 0');
    expect(text).toContain('strata_sidecar_gpu_mode{mode="no_gpu",service="observability"} 1');
    expect(text).not.toMatch(/^DCGM_FI_DEV_GPU_UTIL\{/m);
  });

  it('exports a stand-in nvidia-smi answer under dcgm-exporter names and labels', async () => {
    const c = collector(join(printingNvidiaSmi(), 'nvidia-smi'));
    await c.gpu.poll();
    expect(c.gpu.mode).toBe('gpu');
    expect(c.gpu.up).toBe(true);
    const text = await c.text();
    const labels =
      'gpu="0",UUID="GPU-5c4d2e2a-8d1b-7f43-a6c1-3b0f7c2e9d11",device="nvidia0",modelName="NVIDIA H100 80GB HBM3"';
    for (const [name, value] of [
      ['DCGM_FI_DEV_GPU_UTIL', '87'],
      ['DCGM_FI_DEV_MEM_COPY_UTIL', '41'],
      ['DCGM_FI_DEV_FB_USED', '61440'],
      ['DCGM_FI_DEV_FB_FREE', '20119'],
      ['DCGM_FI_DEV_FB_TOTAL', '81559'],
      ['DCGM_FI_DEV_GPU_TEMP', '58'],
      ['DCGM_FI_DEV_POWER_USAGE', '512.3'],
      ['DCGM_FI_DEV_SM_CLOCK', '1980'],
      ['DCGM_FI_DEV_MEM_CLOCK', '2619'],
    ]) {
      expect(text).toMatch(
        new RegExp(`^${name}\\{${labels},Hostname="[^"]+",service="observability"\\} ${value}$`, 'm'),
      );
    }
    expect(text).toContain('strata_sidecar_gpu_up{service="observability"} 1');
    expect(text).toContain('strata_sidecar_gpus{service="observability"} 1');
  });

  it('keeps the last good values when the query starts failing, and says so', async () => {
    const dir = printingNvidiaSmi();
    const c = collector(join(dir, 'nvidia-smi'));
    await c.gpu.poll();
    writeFileSync(join(dir, 'fail'), '');
    await c.gpu.poll();
    await c.gpu.poll();
    expect(c.gpu.up).toBe(false);
    expect(c.gpu.mode).toBe('gpu');
    expect(c.gpu.lastError).toMatch(/could not communicate with the NVIDIA driver/);
    expect(c.errors()).toBe(2);
    expect(c.lines.filter((l) => l.includes('GPU query failed'))).toHaveLength(1);
    const text = await c.text();
    expect(text).toContain('strata_sidecar_gpu_up{service="observability"} 0');
    expect(text).toMatch(/^DCGM_FI_DEV_GPU_UTIL\{.*\} 87$/m);
  });

  it('fails (not no-GPU) on a hung query and on output it cannot parse', async () => {
    const hung = collector(join(fakeNvidiaSmiDir('exec sleep 30'), 'nvidia-smi'), 200);
    await hung.gpu.poll();
    expect(hung.gpu.mode).toBe('failing');
    expect(hung.errors()).toBe(1);
    const garbled = collector(join(fakeNvidiaSmiDir("echo 'No devices were found, sorry'"), 'nvidia-smi'));
    await garbled.gpu.poll();
    expect(garbled.gpu.mode).toBe('failing');
    expect(garbled.gpu.lastError).toMatch(/expected 12 fields/);
  });
});
