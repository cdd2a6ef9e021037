// GPU telemetry under dcgm-exporter's names and labels (gpu, UUID, device, modelName, Hostname),
// so dashboards and alerts written for dcgm-exporter read the sidecar unchanged. Values are
// read from the collector at scrape time; a field the GPU cannot report is left out, not 0.
// The DCGM_* series are exported only while the values come from nvidia-smi: when they come
// from dcgm-exporter, Prometheus scrapes the exporter itself, and a second copy here would
// show every GPU twice.
import { hostname } from 'node:os';
import { Gauge, type Registry } from '@strata/common';
import { GPU_SOURCES, type GpuCollector } from './collector.js';
import type { GpuSample } from './nvidia-smi.js';

type DcgmLabel = 'gpu' | 'UUID' | 'device' | 'modelName' | 'Hostname';
const DCGM_LABELS: DcgmLabel[] = ['gpu', 'UUID', 'device', 'modelName', 'Hostname'];

/** DCGM field name → help (with unit) and the sample field it reads. */
export const DCGM_FIELDS: [string, string, (g: GpuSample) => number | undefined][] = [
  ['DCGM_FI_DEV_GPU_UTIL', 'GPU utilization (in %).', (g) => g.utilPercent],
  ['DCGM_FI_DEV_MEM_COPY_UTIL', 'Memory utilization (in %).', (g) => g.memUtilPercent],
  ['DCGM_FI_DEV_FB_USED', 'Framebuffer memory used (in MiB).', (g) => g.memUsedMiB],
  ['DCGM_FI_DEV_FB_FREE', 'Framebuffer memory free (in MiB).', (g) => g.memFreeMiB],
  ['DCGM_FI_DEV_FB_TOTAL', 'Framebuffer memory total (in MiB).', (g) => g.memTotalMiB],
  ['DCGM_FI_DEV_GPU_TEMP', 'GPU temperature (in C).', (g) => g.temperatureC],
  ['DCGM_FI_DEV_POWER_USAGE', 'Power draw (in W).', (g) => g.powerW],
  ['DCGM_FI_DEV_SM_CLOCK', 'SM clock frequency (in MHz).', (g) => g.smClockMHz],
  ['DCGM_FI_DEV_MEM_CLOCK', 'Memory clock frequency (in MHz).', (g) => g.memClockMHz],
];

export function registerGpuMetrics(registry: Registry, gpu: GpuCollector): void {
  const host = hostname();
  for (const [name, help, read] of DCGM_FIELDS) {
    new Gauge<DcgmLabel>({
      name,
      help,
      labelNames: DCGM_LABELS,
      registers: [registry],
      collect() {
        this.reset();
        if (gpu.source !== 'nvidia-smi') return;
        for (const g of gpu.gpus) {
          const value = read(g);
          if (value === undefined) continue;
          this.set(
            {
              gpu: String(g.index),
              UUID: g.uuid,
              device: `nvidia${g.index}`,
              modelName: g.name,
              Hostname: host,
            },
            value,
          );
        }
      },
    });
  }
  new Gauge({
    name: 'strata_sidecar_gpu_up',
    help: '1 while the last GPU query (dcgm-exporter or nvidia-smi) succeeded; 0 when it failed or there is no GPU.',
    registers: [registry],
    collect() {
      this.set(gpu.up ? 1 : 0);
    },
  });
  new Gauge({
    name: 'strata_sidecar_gpus',
    help: 'GPUs seen by the last successful query (0 in no-GPU mode).',
    registers: [registry],
    collect() {
      this.set(gpu.gpus.length);
    },
  });
  new Gauge<'mode'>({
    name: 'strata_sidecar_gpu_mode',
    help: 'One-hot: gpu (telemetry from dcgm-exporter or nvidia-smi), no_gpu (none on this node), failing, starting.',
    labelNames: ['mode'],
    registers: [registry],
    collect() {
      for (const mode of ['starting', 'gpu', 'no_gpu', 'failing'] as const) {
        this.set({ mode }, gpu.mode === mode ? 1 : 0);
      }
    },
  });
  new Gauge<'source'>({
    name: 'strata_sidecar_gpu_telemetry_source',
    help: 'One-hot: where the GPU values come from: dcgm (dcgm-exporter), nvidia-smi, none.',
    labelNames: ['source'],
    registers: [registry],
    collect() {
      for (const source of GPU_SOURCES) this.set({ source }, gpu.source === source ? 1 : 0);
    },
  });
  new Gauge({
    name: 'strata_sidecar_gpu_stats_age_seconds',
    help: 'Seconds since the last successful GPU query (-1 before the first one).',
    registers: [registry],
    collect() {
      this.set(gpu.lastSuccessMs === undefined ? -1 : (Date.now() - gpu.lastSuccessMs) / 1000);
    },
  });
}
