// Polls the backend beside this sidecar: GET /load (the compact JSON the router also reads) for
// queue and KV state, and GET /metrics for the engine's preemption total. The last good values
// are kept with the time they were taken; a failed poll changes nothing but `up` and the
// error counters, so the sidecar keeps serving what it has.
import { type LoadReport, type Logger, loadReportSchema } from '@strata/common';
import { sumSamples } from './prom-text.js';

const METRICS_INTERVAL_MS = 1_000;

export type BackendSource = 'backend_load' | 'backend_metrics';

export interface BackendCollectorOptions {
  backendUrl: string;
  timeoutMs: number;
  logger: Logger;
  onError?: (source: BackendSource) => void;
}

export interface BackendSnapshot {
  load: LoadReport;
  /** vllm:num_preemptions_total, summed over models; undefined until /metrics answered. */
  preemptionsTotal: number | undefined;
  /** Epoch ms (this sidecar's clock) when `load` was read. */
  takenAtMs: number;
}

export class BackendCollector {
  last: BackendSnapshot | undefined;
  up = false;
  lastError: string | undefined;
  private readonly base: string;
  private metricsReadAtMs = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: BackendCollectorOptions) {
    this.base = options.backendUrl.replace(/\/$/, '');
  }

  /** One poll; resolves true when /load answered (the snapshot was refreshed). */
  async poll(): Promise<boolean> {
    // /metrics is bigger and only feeds a windowed count: read it at most once a second.
    const wantMetrics = Date.now() - this.metricsReadAtMs >= METRICS_INTERVAL_MS;
    if (wantMetrics) this.metricsReadAtMs = Date.now();
    const [load, metrics] = await Promise.allSettled([
      this.fetchLoad(),
      wantMetrics ? this.fetchMetricsText() : Promise.resolve(undefined),
    ]);
    let preemptions = this.last?.preemptionsTotal;
    if (metrics.status === 'fulfilled') {
      if (metrics.value !== undefined) {
        preemptions = sumSamples(metrics.value, 'vllm:num_preemptions_total') ?? preemptions;
      }
    } else this.options.onError?.('backend_metrics');
    if (load.status === 'rejected') {
      this.options.onError?.('backend_load');
      const message = (load.reason as Error).message;
      if (this.up || this.lastError === undefined) {
        this.options.logger.warn(
          { err: message, backend: this.base },
          'backend poll failed; keeping last values',
        );
      }
      this.up = false;
      this.lastError = message;
      return false;
    }
    if (!this.up) this.options.logger.info({ backend: this.base }, 'backend poll up');
    this.up = true;
    this.lastError = undefined;
    this.last = { load: load.value, preemptionsTotal: preemptions, takenAtMs: Date.now() };
    return true;
  }

  private async get(path: string): Promise<Response> {
    const response = await fetch(`${this.base}${path}`, {
      signal: AbortSignal.timeout(this.options.timeoutMs),
    });
    if (!response.ok) {
      await response.body?.cancel();
      throw new Error(`GET ${path} answered ${response.status}`);
    }
    return response;
  }

  private async fetchLoad(): Promise<LoadReport> {
    const body: unknown = await (await this.get('/load')).json();
    const parsed = loadReportSchema.safeParse(body);
    if (!parsed.success) throw new Error(`GET /load: unexpected body: ${parsed.error.message}`);
    return parsed.data;
  }

  private async fetchMetricsText(): Promise<string> {
    return (await this.get('/metrics')).text();
  }
}
