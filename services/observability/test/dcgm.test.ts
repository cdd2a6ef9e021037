import { join } from 'node:path';
import { createLogger, createMetrics } from '@strata/common';
import { afterEach, describe, expect, it } from 'vitest';
import { type DcgmOptions, GpuCollector } from '../src/gpu/collector.js';
import { parseExposition, podGpusFromExposition } from '../src/gpu/dcgm.js';
import { registerGpuMetrics } from '../src/gpu/metrics.js';
import {
  type DcgmExporterLike,
  dcgmExporterLike,
  dcgmExposition,
  OTHER_POD,
  THIS_POD,
} from './support/dcgm-exporter.js';
import { printingNvidiaSmi } from './support/fake-nvidia-smi.js';

const exporters: DcgmExporterLike[] = [];
afterEach(async () => {
  await Promise.all(exporters.splice(0).map((e) => e.close()));
});

async function exporter(body?: () => string) {
  const e = await dcgmExporterLike(body);
  exporters.push(e);
  return e;
}

/** A URL where nothing listens: a server that was started on port 0 and closed. */
async function deadUrl(): Promise<string> {
  const e = await dcgmExporterLike();
  await e.close();
  return e.url;
}

const NO_NVIDIA_SMI = 'nvidia-smi-not-installed-here';

function collector(nvidiaSmi: string, dcgm: Partial<DcgmOptions> & { url: string }) {
  const lines: string[] = [];
  const logger = createLogger({
    service: 'observability',
    destination: { write: (line: string) => void lines.push(line) },
  });
  const errors = { gpu: 0, dcgm: 0 };
  const gpu = new GpuCollector({
    nvidiaSmi,
    timeoutMs: 2_000,
    logger,
    dcgm: { pod: THIS_POD, retryMs: 60_000, ...dcgm },
    onError: (source) => errors[source]++,
  });
  const metrics = createMetrics('observability', { defaultMetrics: false });
  registerGpuMetrics(metrics.registry, gpu);
  return { gpu, lines, errors, text: () => metrics.registry.metrics() };
}

describe('dcgm-exporter exposition', () => {
  it("maps this pod's GPU, and only it, onto the nvidia-smi sample fields", () => {
    expect(podGpusFromExposition(dcgmExposition(), THIS_POD)).toEqual([
      {
        index: 0,
        uuid: 'GPU-1b4c7e2d-8a3f-4e61-9c0d-5f2a7b8e9c10',
        name: 'NVIDIA H100 80GB HBM3',
        utilPercent: 97,
        memUtilPercent: 61,
        memUsedMiB: 71234,
        memFreeMiB: 9845,
        // No FB_TOTAL among the default counters: used + free.
        memTotalMiB: 81079,
        temperatureC: 67,
        powerW: 612.5,
        smClockMHz: 1980,
        memClockMHz: 2619,
        smActiveRatio: 0.812345,
        dramActiveRatio: 0.734512,
      },
    ]);
    const other = podGpusFromExposition(dcgmExposition(), OTHER_POD);
    expect(other.map((g) => [g.index, g.utilPercent, g.powerW])).toEqual([[1, 12, 143.2]]);
  });

  it('leaves the profiling ratios out when the exporter has no profiling fields', () => {
    const devOnly = dcgmExposition(['DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_DEV_FB_USED', 'DCGM_FI_DEV_FB_FREE']);
    const [gpu] = podGpusFromExposition(devOnly, THIS_POD);
    expect(gpu).toMatchObject({ utilPercent: 97, memTotalMiB: 81079 });
    expect(gpu?.smActiveRatio).toBeUndefined();
    expect(gpu?.powerW).toBeUndefined();
  });

  it('says why when no series belongs to this pod, or the text is not an exporter answer', () => {
    expect(() => podGpusFromExposition(dcgmExposition(), { ...THIS_POD, namespace: 'other' })).toThrow(
      `no series for pod other/${THIS_POD.name}`,
    );
    expect(() => podGpusFromExposition('up 1\n', THIS_POD)).toThrow('no DCGM_FI_* series');
    expect(() => podGpusFromExposition('DCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n', THIS_POD)).toThrow(
      'unparsable labels',
    );
    expect(() => podGpusFromExposition('DCGM_FI_DEV_GPU_UTIL{gpu="0"} many\n', THIS_POD)).toThrow(
      'unparsable sample value',
    );
  });

  it('matches the pod by name alone without a namespace, and reads the old label names', () => {
    const old = dcgmExposition(['DCGM_FI_DEV_GPU_UTIL'])
      .replaceAll('namespace=', 'pod_namespace=')
      .replaceAll('pod="', 'pod_name="');
    const gpus = podGpusFromExposition(old, { name: THIS_POD.name, namespace: undefined });
    expect(gpus.map((g) => g.utilPercent)).toEqual([97]);
  });

  it("treats DCGM's blank sentinels as no reading and unescapes label values", () => {
    const text = [
      '# a comment',
      'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="Odd \\"name\\", with \\\\ things",pod="p"} 55',
      // What older exporters printed for a field the board cannot report.
      'DCGM_FI_DEV_POWER_USAGE{gpu="0", UUID="GPU-a", pod="p"} 9223372036854775794',
      'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",pod="p"} 140737488355328.000000',
      'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a",pod="p"} NaN',
    ].join('\n');
    const [gpu] = podGpusFromExposition(text, { name: 'p', namespace: undefined });
    expect(gpu).toMatchObject({ name: 'Odd "name", with \\ things', utilPercent: 55 });
    expect(gpu?.powerW).toBeUndefined();
    expect(gpu?.temperatureC).toBeUndefined();
    expect(gpu?.smClockMHz).toBeUndefined();
    expect(parseExposition('x{a="1"} +Inf', () => true)).toEqual([
      { name: 'x', labels: { a: '1' }, value: Number.POSITIVE_INFINITY },
    ]);
  });
});

describe('GPU sources in order: DCGM, then nvidia-smi, then no GPU', () => {
  it('prefers DCGM over a working nvidia-smi and does not re-export the DCGM series', async () => {
    const dcgm = await exporter();
    const c = collector(join(printingNvidiaSmi(), 'nvidia-smi'), { url: dcgm.url });
    await c.gpu.poll();
    expect(c.gpu.source).toBe('dcgm');
    expect(c.gpu.up).toBe(true);
    expect(c.gpu.gpus.map((g) => [g.index, g.utilPercent])).toEqual([[0, 97]]);
    expect(c.gpu.dcgm?.lastError).toBeUndefined();
    const text = await c.text();
    expect(text).toContain('strata_sidecar_gpu_telemetry_source{source="dcgm",service="observability"} 1');
    expect(text).toContain(
      'strata_sidecar_gpu_telemetry_source{source="nvidia-smi",service="observability"} 0',
    );
    expect(text).toContain('strata_sidecar_gpus{service="observability"} 1');
    // Prometheus scrapes the exporter itself: no second copy of its series here.
    expect(text).not.toMatch(/^DCGM_FI_DEV_GPU_UTIL\{/m);
  });

  it('falls back to nvidia-smi when DCGM is unreachable, and retries DCGM only after the retry period', async () => {
    const c = collector(join(printingNvidiaSmi(), 'nvidia-smi'), { url: await deadUrl() });
    await c.gpu.poll();
    expect(c.gpu.source).toBe('nvidia-smi');
    expect(c.gpu.up).toBe(true);
    expect(c.gpu.gpus.map((g) => g.utilPercent)).toEqual([87]);
    expect(c.gpu.dcgm?.lastError).toMatch(/ECONNREFUSED/);
    expect(c.errors).toEqual({ gpu: 0, dcgm: 1 });
    expect(c.lines.filter((l) => l.includes('dcgm-exporter read failed'))).toHaveLength(1);
    await c.gpu.poll();
    // Within the retry period DCGM is not asked again.
    expect(c.errors).toEqual({ gpu: 0, dcgm: 1 });
    const text = await c.text();
    expect(text).toContain(
      'strata_sidecar_gpu_telemetry_source{source="nvidia-smi",service="observability"} 1',
    );
    expect(text).toMatch(/^DCGM_FI_DEV_GPU_UTIL\{.*\} 87$/m);
  });

  it('falls back when DCGM answers without this pod, and returns to DCGM once it has it', async () => {
    let body = dcgmExposition().replaceAll(THIS_POD.name, 'some-other-pod');
    const dcgm = await exporter(() => body);
    const c = collector(join(printingNvidiaSmi(), 'nvidia-smi'), { url: dcgm.url, retryMs: 1 });
    await c.gpu.poll();
    expect(c.gpu.source).toBe('nvidia-smi');
    expect(c.gpu.dcgm?.lastError).toContain(`no series for pod strata/${THIS_POD.name}`);
    body = dcgmExposition();
    await new Promise((r) => setTimeout(r, 5));
    await c.gpu.poll();
    expect(c.gpu.source).toBe('dcgm');
    expect(c.gpu.dcgm?.lastError).toBeUndefined();
    expect(dcgm.hits()).toBe(2);
    expect(c.lines.filter((l) => l.includes('dcgm-exporter answers again'))).toHaveLength(1);
  });

  it('runs in clean no-GPU mode with neither DCGM nor nvidia-smi', async () => {
    const c = collector(NO_NVIDIA_SMI, { url: await deadUrl() });
    await c.gpu.poll();
    await c.gpu.poll();
    expect(c.gpu.mode).toBe('no_gpu');
    expect(c.gpu.source).toBe('none');
    expect(c.gpu.up).toBe(false);
    expect(c.gpu.lastError).toBeUndefined();
    expect(c.errors).toEqual({ gpu: 0, dcgm: 1 });
    expect(c.lines.filter((l) => l.includes('no GPU'))).toHaveLength(1);
    const text = await c.text();
    expect(text).toContain('strata_sidecar_gpu_telemetry_source{source="none",service="observability"} 1');
    expect(text).toContain('strata_sidecar_gpu_mode{mode="no_gpu",service="observability"} 1');
  });

  it('keeps the DCGM values and reports telemetry down when the exporter goes away with no nvidia-smi', async () => {
    const dcgm = await exporter();
    const c = collector(NO_NVIDIA_SMI, { url: dcgm.url });
    await c.gpu.poll();
    expect(c.gpu.up).toBe(true);
    await dcgm.close();
    await c.gpu.poll();
    expect(c.gpu.mode).toBe('gpu');
    expect(c.gpu.up).toBe(false);
    expect(c.gpu.source).toBe('dcgm');
    expect(c.gpu.lastError).toMatch(/^dcgm-exporter: GET .* no nvidia-smi to fall back on$/);
    expect(c.gpu.gpus.map((g) => g.utilPercent)).toEqual([97]);
    expect(c.errors).toEqual({ gpu: 0, dcgm: 1 });
    expect(await c.text()).toContain('strata_sidecar_gpu_up{service="observability"} 0');
  });

  it('times a stalled exporter out and falls back', async () => {
    // Accepts the connection, never answers.
    const stalled = await exporter(() => '');
    stalled.server.removeAllListeners('request');
    const c = collector(join(printingNvidiaSmi(), 'nvidia-smi'), { url: stalled.url });
    const t0 = Date.now();
    await c.gpu.poll();
    expect(Date.now() - t0).toBeLessThan(4_000);
    expect(c.gpu.source).toBe('nvidia-smi');
    expect(c.gpu.dcgm?.lastError).toContain('no answer within 2000 ms');
  });
});
