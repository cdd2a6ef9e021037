// The sidecar's moving parts: the GPU and backend collectors on their own poll loops, the
// diagnoser fed by every backend poll, and the metrics over all three. Nothing here is on a
// request path: a failing source only changes what the metrics and /status say.
import { hostname } from 'node:os';
import { Counter, type Logger, type Readiness, type Registry } from '@strata/common';
import { BackendCollector, type BackendSource } from './backend/collector.js';
import { registerBackendMetrics } from './backend/metrics.js';
import type { Config } from './config.js';
import { Diagnoser } from './diagnosis/diagnoser.js';
import { registerDiagnosisMetrics } from './diagnosis/metrics.js';
import { GpuCollector, type GpuErrorSource } from './gpu/collector.js';
import { registerGpuMetrics } from './gpu/metrics.js';
import { type PollLoop, startPollLoop } from './poll-loop.js';

export type ScrapeSource = BackendSource | GpuErrorSource;
const SCRAPE_SOURCES: ScrapeSource[] = ['backend_load', 'backend_metrics', 'gpu', 'dcgm'];

export interface Sidecar {
  gpu: GpuCollector;
  backend: BackendCollector;
  diagnoser: Diagnoser;
  /** One backend poll and diagnosis step (what the backend loop runs). */
  pollBackend(): Promise<void>;
  /** One GPU query (what the GPU loop runs). */
  pollGpu(): Promise<void>;
  /** Starts the poll loops (separate from construction so tests can drive polls by hand). */
  start(): void;
  stop(): void;
}

export function createSidecar(
  config: Config,
  logger: Logger,
  registry: Registry,
  readiness: Readiness,
): Sidecar {
  const errors = new Counter<'source'>({
    name: 'strata_sidecar_scrape_errors_total',
    help: 'Failed polls of a telemetry source (backend_load, backend_metrics, gpu = nvidia-smi, dcgm).',
    labelNames: ['source'],
    registers: [registry],
  });
  for (const source of SCRAPE_SOURCES) errors.inc({ source }, 0);

  const gpu = new GpuCollector({
    nvidiaSmi: config.gpu.nvidiaSmi,
    timeoutMs: config.gpu.timeoutMs,
    logger,
    dcgm: config.gpu.dcgmUrl
      ? {
          url: config.gpu.dcgmUrl,
          pod: { name: config.pod.name ?? hostname(), namespace: config.pod.namespace },
          retryMs: config.gpu.dcgmRetryMs,
        }
      : undefined,
    onError: (source) => errors.inc({ source }),
  });
  const backend = new BackendCollector({
    backendUrl: config.backendUrl,
    timeoutMs: config.backendTimeoutMs,
    logger,
    onError: (source) => errors.inc({ source }),
  });
  const diagnoser = new Diagnoser(config.diagnosis);
  registerGpuMetrics(registry, gpu);
  registerBackendMetrics(registry, backend);
  registerDiagnosisMetrics(registry, diagnoser, () => backend.last?.load.model);

  // Readiness reports each source's state but never blocks on it: the sidecar serves what it
  // has, and a not-ready sidecar would only hide the metrics that explain the failure.
  const report = () => {
    const mode = gpu.source === 'none' ? gpu.mode : `${gpu.mode} (${gpu.source})`;
    readiness.set('gpu', true, gpu.lastError ? `${mode}: ${gpu.lastError}` : mode);
    readiness.set(
      'backend',
      true,
      backend.up ? 'polling' : `${backend.lastError ?? 'not polled yet'}; serving last values`,
    );
  };
  report();

  const pollBackend = async () => {
    if (!(await backend.poll())) return report();
    const snapshot = backend.last;
    if (!snapshot) return report();
    const utils = gpu.gpus.map((g) => g.utilPercent).filter((u): u is number => u !== undefined);
    diagnoser.observe({
      running: snapshot.load.running,
      waiting: snapshot.load.waiting,
      kvUsage: snapshot.load.kv_usage,
      preemptionsTotal: snapshot.preemptionsTotal,
      gpuUtil: gpu.up && utils.length > 0 ? Math.max(...utils) / 100 : undefined,
      atMs: snapshot.takenAtMs,
    });
    report();
  };
  const pollGpu = async () => {
    await gpu.poll();
    report();
  };

  let loops: PollLoop[] = [];
  return {
    gpu,
    backend,
    diagnoser,
    pollBackend,
    pollGpu,
    start() {
      loops = [
        startPollLoop(pollGpu, config.gpu.intervalMs),
        startPollLoop(pollBackend, config.backendIntervalMs),
      ];
    },
    stop() {
      for (const loop of loops) loop.stop();
      loops = [];
    },
  };
}
