// Queries the GPUs through nvidia-smi and keeps the last good sample. Three modes:
//  - gpu: the last query succeeded (or failed after earlier successes: values are kept, up=0);
//  - no_gpu: there is no nvidia-smi on this machine (a CPU node); logged once, never an error;
//  - failing: nvidia-smi exists but its query fails (driver gone, timeout, bad output).
import { execFile } from 'node:child_process';
import type { Logger } from '@strata/common';
import { type GpuSample, parseGpuQuery, QUERY_FIELDS } from './nvidia-smi.js';

export type GpuMode = 'starting' | 'gpu' | 'no_gpu' | 'failing';

export interface GpuCollectorOptions {
  nvidiaSmi: string;
  timeoutMs: number;
  logger: Logger;
  /** Called once per failed query (not for no_gpu). */
  onError?: () => void;
}

export class GpuCollector {
  mode: GpuMode = 'starting';
  /** The last successful query's GPUs; kept through later failures. */
  gpus: GpuSample[] = [];
  /** Epoch ms of the last successful query. */
  lastSuccessMs: number | undefined;
  lastError: string | undefined;

  constructor(private readonly options: GpuCollectorOptions) {}

  /** True while the last query answered: nvidia-smi ran and its output parsed. */
  get up(): boolean {
    return this.mode === 'gpu' && this.lastError === undefined;
  }

  async poll(): Promise<void> {
    let stdout: string;
    try {
      stdout = await this.query();
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (e.code === 'ENOENT') return this.enterNoGpu();
      return this.fail(`nvidia-smi failed: ${e.message.trim()}`);
    }
    try {
      this.gpus = parseGpuQuery(stdout);
    } catch (err) {
      return this.fail((err as Error).message);
    }
    if (this.mode !== 'gpu' || this.lastError !== undefined) {
      this.options.logger.info({ gpus: this.gpus.length }, 'GPU telemetry up');
    }
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

  private enterNoGpu(): void {
    if (this.mode !== 'no_gpu') {
      this.options.logger.info(
        { nvidia_smi: this.options.nvidiaSmi },
        'no GPU: nvidia-smi not found; GPU telemetry off (0 GPUs), the rest of the sidecar runs',
      );
    }
    this.mode = 'no_gpu';
    this.gpus = [];
    this.lastError = undefined;
  }

  private fail(message: string): void {
    this.options.onError?.();
    // Log on the change only: a failing driver must not flood the log once a second.
    if (this.lastError === undefined) this.options.logger.warn({ err: message }, 'GPU query failed');
    this.lastError = message;
    if (this.mode !== 'gpu') this.mode = 'failing';
  }
}
