// Owns the model's lifecycle in the service: loads it after the server is listening (so
// /health/live answers during a long load), warms it up, and only then reports ready.
import { type Logger, type Readiness, StrataError } from '@strata/common';
import type { Config } from '../config.js';
import { InferenceRuntime, type RuntimeObserver } from './runtime.js';
import { warmUp } from './warmup.js';

export class ModelHost {
  private runtime: InferenceRuntime | undefined;
  private state = 'not started';

  constructor(
    private readonly config: Config,
    private readonly readiness: Readiness,
    private readonly logger: Logger,
    private readonly observer?: RuntimeObserver,
  ) {
    readiness.set(
      'model_loaded',
      false,
      config.modelDir ? 'loading' : 'no model configured: set STRATA_MODEL_DIR',
    );
    if (config.warmup) readiness.set('warmup_done', false, 'waiting for the model');
  }

  /** Loads and warms up; failures are logged and leave the service live but not ready. */
  async start(): Promise<void> {
    if (!this.config.modelDir) return;
    try {
      this.state = 'loading';
      const started = performance.now();
      this.runtime = await InferenceRuntime.load(this.config, this.observer);
      const info = this.runtime.engine.info;
      this.logger.info(
        {
          model: this.runtime.modelName,
          load_seconds: (performance.now() - started) / 1e3,
          engine: info.engine,
          backend: info.backend,
          kernels: info.kernelIsa,
        },
        'model loaded',
      );
      this.readiness.set('model_loaded', true, this.runtime.modelName);
      if (this.config.warmup) {
        this.state = 'warming up';
        this.readiness.set('warmup_done', false, 'running warmup requests');
        const report = await warmUp(this.runtime, this.logger);
        this.readiness.set(
          'warmup_done',
          true,
          `${report.requests} requests in ${report.seconds.toFixed(2)} s`,
        );
      }
      this.state = 'ready';
    } catch (err) {
      this.state = 'failed';
      const message = (err as Error).message;
      this.readiness.set('model_loaded', false, `failed to load: ${message}`);
      this.logger.error({ err }, 'model failed to load');
    }
  }

  /** The runtime for a request; 503 STRATA_NOT_READY while loading, warming up or failed. */
  get(): InferenceRuntime {
    if (this.runtime && this.state === 'ready') return this.runtime;
    throw new StrataError('STRATA_NOT_READY', `the model is not ready (${this.state}); see /health/ready`);
  }

  /** Loaded, even if still warming up (metrics and load reporting use it). */
  get loaded(): InferenceRuntime | undefined {
    return this.runtime;
  }

  async close(): Promise<void> {
    await this.runtime?.close();
  }
}
