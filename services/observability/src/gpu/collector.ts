// Reads this pod's GPUs and keeps the last good sample. Two sources, tried in order on every
// poll:
//  1. dcgm-exporter on this node (when a DCGM URL is configured): the series of this pod's
//     GPUs. After a failed read it is skipped for dcgmRetryMs, so an exporter that is down or
//     unreachable costs one timeout per retry period, not one per poll;
//  2. nvidia-smi, as before.
// Modes:
//  - gpu: the last poll succeeded (or failed after earlier successes: values are kept, up=0);
//  - no_gpu: no DCGM answer and no nvidia-smi on this machine (a CPU node, or a hardened GPU
//    node whose runtime gives the sidecar no driver); logged once, never an error;
//  - failing: a source exists but fails (driver gone, timeout, bad output) with no good sample yet.
// `source` names where the kept values came from: dcgm, nvidia-smi, or none.
import { execFile } from 'node:child_process';
import type { Logger } from '@strata/common';
import { type DcgmPod, readDcgm } from './dcgm.js';
import { type GpuSample, parseGpuQuery, QUERY_FIELDS } from './nvidia-smi.js';

export type GpuMode = 'starting' | 'gpu' | 'no_gpu' | 'failing';
export const GPU_SOURCES = ['dcgm', 'nvidia-smi', 'none'] as const;
export type GpuSource = (typeof GPU_SOURCES)[number];
export type GpuErrorSource = 'gpu' | 'dcgm';

export interface DcgmOptions {
  /** dcgm-exporter's /metrics on this node. */
  url: string;
  /** This pod, as dcgm-exporter's pod mapping names it. */
  pod: DcgmPod;
  /** After a failed read, nvidia-smi alone is used for this long, in ms. */
  retryMs: number;
}

export interface GpuCollectorOptions {
  nvidiaSmi: string;
  /** Timeout of one nvidia-smi query and of one DCGM read, in ms. */
  timeoutMs: number;
  logger: Logger;
  /** Read before nvidia-smi when given. */
  dcgm?: DcgmOptions;
  /** Called once per failed query: 'dcgm' for a failed DCGM read, 'gpu' for nvidia-smi (not for no_gpu). */
  onError?: (source: GpuErrorSource) => void;
}

export interface DcgmState {
  url: string;
  lastError: string | undefined;
  /** Epoch ms of the last read that gave this pod's GPUs. */
  lastSuccessMs: number | undefined;
}

export class GpuCollector {
  mode: GpuMode = 'starting';
  source: GpuSource = 'none';
  /** The last successful query's GPUs; kept through later failures. */
  gpus: GpuSample[] = [];
  /** Epoch ms of the last successful query. */
  lastSuccessMs: number | undefined;
  lastError: string | undefined;
  /** The DCGM source's own state; undefined when no DCGM URL is configured. */
  readonly dcgm: DcgmState | undefined;
  private dcgmRetryAtMs = 0;

  constructor(private readonly options: GpuCollectorOptions) {
    if (options.dcgm) this.dcgm = { url: options.dcgm.url, lastError: undefined, lastSuccessMs: undefined };
  }

  /** True while the last query answered: DCGM or nvidia-smi gave this pod's GPUs. */
  get up(): boolean {
    return this.mode === 'gpu' && this.lastError === undefined;
  }

  async poll(): Promise<void> {
    if (this.options.dcgm && Date.now() >= this.dcgmRetryAtMs) {
      const gpus = await this.readDcgm(this.options.dcgm);
      if (gpus) return this.succeed('dcgm', gpus);
    }
    let stdout: string;
    try {
      stdout = await this.query();
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (e.code === 'ENOENT') return this.noNvidiaSmi();
      return this.fail(`nvidia-smi failed: ${e.message.trim()}`);
    }
    let gpus: GpuSample[];
    try {
      gpus = parseGpuQuery(stdout);
    } catch (err) {
      return this.fail((err as Error).message);
    }
    this.succeed('nvidia-smi', gpus);
  }

  private async readDcgm(dcgm: DcgmOptions): Promise<GpuSample[] | undefined> {
    const state = this.dcgm as DcgmState;
    try {
      const gpus = await readDcgm(dcgm.url, dcgm.pod, this.options.timeoutMs);
      if (state.lastError !== undefined)
        this.options.logger.info({ url: dcgm.url }, 'dcgm-exporter answers again');
      state.lastError = undefined;
      state.lastSuccessMs = Date.now();
      return gpus;
    } catch (err) {
      const message = (err as Error).message;
      this.options.onError?.('dcgm');
      // Once per distinct reason: a missing exporter must not log every retry period.
      if (state.lastError !== message) {
        this.options.logger.warn(
          { err: message, url: dcgm.url, retry_ms: dcgm.retryMs },
          'dcgm-exporter read failed; nvidia-smi until the next try',
        );
      }
      state.lastError = message;
      this.dcgmRetryAtMs = Date.now() + dcgm.retryMs;
      return undefined;
    }
  }

  private succeed(source: GpuSource, gpus: GpuSample[]): void {
    if (this.mode !== 'gpu' || this.lastError !== undefined || this.source !== source) {
      this.options.logger.info({ gpus: gpus.length, source }, 'GPU telemetry up');
    }
    this.gpus = gpus;
    this.source = source;
    this.mode = 'gpu';
    this.lastError = undefined;
    this.lastSuccessMs = Date.now();
  }

  private query(): Promise<string> {
    const args = [`--query-gpu=${QUERY_FIELDS.join(',')}`, '--format=csv,noheader,nounits'];
    return new Promise((resolve, reject) => {
      execFile(
        this.options.nvidiaSmi,
        args,
        { timeout: this.options.timeoutMs, maxBuffer: 1024 * 1024 },
        (err, stdout, stderr) => {
          if (err) {
            // nvidia-smi prints why it failed on stdout ("NVIDIA-SMI has failed because ...").
            const why = `${stderr}${stdout}`.trim().split('\n')[0];
            if (why) err.message = `${err.message}: ${why}`;
            reject(err);
          } else resolve(stdout);
        },
      );
    });
  }

  private noNvidiaSmi(): void {
    // The kept values came from DCGM, which now fails: telemetry is down, not a GPU-less node.
    // The DCGM read counted its own error.
    if (this.source === 'dcgm' && this.dcgm?.lastError !== undefined) {
      this.fail(`dcgm-exporter: ${this.dcgm.lastError}; no nvidia-smi to fall back on`, false);
      return;
    }
    if (this.mode !== 'no_gpu') {
      this.options.logger.info(
        { nvidia_smi: this.options.nvidiaSmi, dcgm: this.dcgm?.url, dcgm_error: this.dcgm?.lastError },
        this.dcgm
          ? 'no GPU: no DCGM answer for this pod and nvidia-smi not found; GPU telemetry off (0 GPUs), the rest of the sidecar runs'
          : 'no GPU: nvidia-smi not found; GPU telemetry off (0 GPUs), the rest of the sidecar runs',
      );
    }
    this.mode = 'no_gpu';
    this.source = 'none';
    this.gpus = [];
    this.lastError = undefined;
  }

  private fail(message: string, count = true): void {
    if (count) this.options.onError?.('gpu');
    // Log on the change only: a failing driver must not flood the log once a second.
    if (this.lastError === undefined) this.options.logger.warn({ err: message }, 'GPU query failed');
    this.lastError = message;
    if (this.mode !== 'gpu') this.mode = 'failing';
  }
}
