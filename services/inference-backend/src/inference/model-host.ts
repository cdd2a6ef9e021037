// Owns the model's lifecycle in the service: loads it after the server is listening (so
// /health/live answers during a long load), warms it up, and only then reports ready.
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { type Tracer, trace } from '@opentelemetry/api';
import { type Logger, type Readiness, StrataError } from '@strata/common';
import type { Config } from '../config.js';
import type { ModelFiles } from '../model/model-files.js';
import { InferenceRuntime, type RequestRecord, type RuntimeObserver, type SharedRuntime } from './runtime.js';
import { warmUp } from './warmup.js';

/** How long loading the model took and how fast its weights came off the disk. */
export interface LoadReport {
  /** The engine's load (weights read, converted, copied to the device; KV pool set up), seconds. */
  seconds: number;
  /** The checkpoint's weight bytes: the .safetensors files of the directory, or the GGUF file. */
  bytes: number;
  /** bytes / seconds, in GB (1e9 bytes) per second. */
  gbPerSecond: number;
}

/** Bytes of the weight files the engine reads for `files`. */
export async function weightBytes(files: ModelFiles): Promise<number> {
  if (files.format === 'gguf') return (await stat(files.path)).size;
  let bytes = 0;
  for (const e of await readdir(files.dir, { withFileTypes: true })) {
    if ((e.isFile() || e.isSymbolicLink()) && e.name.endsWith('.safetensors'))
      bytes += (await stat(join(files.dir, e.name))).size;
  }
  return bytes;
}

export class ModelHost {
  private runtime: InferenceRuntime | undefined;
  private lifecycle = 'not started';
  private closing = false;
  private report: LoadReport | undefined;
  private readonly observers: RuntimeObserver[] = [];

  /**
   * Every finished request is logged (one line, see logFinished) and handed to the observers;
   * `tracer` (ctx.telemetry.tracer) gets a span per request, a no-op without an OTLP endpoint.
   * With `attach` (an HTTP worker thread) start() attaches to the engine another thread loaded
   * and warmed up instead of loading one.
   */
  constructor(
    private readonly config: Config,
    private readonly readiness: Readiness,
    private readonly logger: Logger,
    observer?: RuntimeObserver,
    private readonly tracer: Tracer = trace.getTracer('inference-backend'),
    private readonly attach?: SharedRuntime,
  ) {
    if (observer) this.observers.push(observer);
    readiness.set(
      'model_loaded',
      false,
      config.modelDir ? 'loading' : 'no model configured: set STRATA_MODEL_DIR',
    );
    if (config.warmup && !attach) readiness.set('warmup_done', false, 'waiting for the model');
  }

  /**
   * While the engine loads, a `model load progress` line every loadProgressMs: the checkpoint's
   * bytes read so far and in all (the native load writes them into `progress`), the percentage,
   * the rate so far and the seconds since the load began. A load that ends first logs none.
   */
  private reportLoadProgress(progress: BigInt64Array): NodeJS.Timeout | undefined {
    const every = this.config.loadProgressMs;
    if (every <= 0) return undefined;
    const started = performance.now();
    const timer = setInterval(() => {
      const done = Number(Atomics.load(progress, 0));
      const total = Number(Atomics.load(progress, 1));
      const seconds = (performance.now() - started) / 1e3;
      this.logger.info(
        {
          model: this.config.modelDir,
          bytes_done: done,
          bytes_total: total,
          percent: total > 0 ? Math.min(100, Math.round((1000 * done) / total) / 10) : 0,
          gb_per_s: seconds > 0 ? done / 1e9 / seconds : 0,
          seconds,
        },
        'model load progress',
      );
    }, every);
    timer.unref();
    return timer;
  }

  /** Loads and warms up; failures are logged and leave the service live but not ready. */
  async start(): Promise<void> {
    if (!this.config.modelDir) return;
    if (this.attach) return this.attachRuntime(this.attach);
    const progress = new BigInt64Array(2);
    const reporting = this.reportLoadProgress(progress);
    try {
      this.lifecycle = 'loading';
      const started = performance.now();
      this.runtime = await InferenceRuntime.load(this.config, this.fanout, this.tracer, progress).finally(
        () => clearInterval(reporting),
      );
      const info = this.runtime.engine.info;
      const bytes = await weightBytes(this.runtime.files);
      this.report = {
        seconds: info.loadSeconds,
        bytes,
        gbPerSecond: info.loadSeconds > 0 ? bytes / 1e9 / info.loadSeconds : 0,
      };
      this.logger.info(
        {
          model: this.runtime.modelName,
          format: this.runtime.files.format,
          quantization: this.runtime.files.quantization,
          chat_template: this.runtime.files.chatTemplateOrigin,
          load_seconds: (performance.now() - started) / 1e3,
          // The engine's part of it, the weight bytes it read and the rate (also as metrics:
          // strata_backend_model_load_*).
          engine_load_seconds: this.report.seconds,
          load_bytes: this.report.bytes,
          engine: info.engine,
          backend: info.backend,
          kernels: info.kernelIsa,
          device: info.device,
          dtype: info.dtype,
          weights: info.weights,
          kv_cache_dtype: info.kvCacheDtype,
          load_gb_per_s: this.report.gbPerSecond,
          // The CUDA backend's copy of the checkpoint to the device alone (0 on the CPU backend).
          device_load_gb_per_s: info.loadGBPerSecond,
          sampling: info.sampling,
          ...(info.samplingNote ? { sampling_note: info.samplingNote } : {}),
          ...(info.decodeKernels ? { decode_kernels: info.decodeKernels } : {}),
          // Structured output: llguidance's version, or why constrained requests are refused.
          structured_output: this.runtime.grammar.available
            ? this.runtime.grammar.version
            : `unavailable: ${this.runtime.grammar.message}`,
          // Its share of load_seconds: reading the vocabulary into the grammar engine, after the
          // engine's load (the tokenizer loads beside it).
          ...(this.runtime.grammar.available
            ? { structured_output_load_seconds: this.runtime.grammar.loadSeconds }
            : {}),
          // Prompts are refused by size over max_model_len times this (null: counted in tokens only).
          token_max_bytes: this.runtime.tokenizer.byteBound.maxTokenBytes,
          ...(this.runtime.tokenizer.byteBound.reason
            ? { token_max_bytes_note: this.runtime.tokenizer.byteBound.reason }
            : {}),
        },
        'model loaded',
      );
      this.readiness.set('model_loaded', true, this.runtime.modelName);
      if (this.config.warmup) {
        this.lifecycle = 'warming up';
        this.readiness.set('warmup_done', false, 'running warmup requests');
        const report = await warmUp(this.runtime, this.logger);
        this.fanout.warmupDone?.();
        this.readiness.set(
          'warmup_done',
          true,
          `${report.requests} requests in ${report.seconds.toFixed(2)} s`,
        );
      }
      this.lifecycle = 'ready';
    } catch (err) {
      this.lifecycle = 'failed';
      const message = (err as Error).message;
      this.readiness.set('model_loaded', false, `failed to load: ${message}`);
      // A shutdown during load or warmup closes the engine under it: that is no failure.
      if (this.closing)
        this.logger.info({ reason: message }, 'model load stopped: the service is shutting down');
      else this.logger.error({ err }, 'model failed to load');
    }
  }

  private async attachRuntime(shared: SharedRuntime): Promise<void> {
    try {
      this.lifecycle = 'loading';
      this.runtime = await InferenceRuntime.attach(this.config, shared, this.fanout, this.tracer);
      this.readiness.set('model_loaded', true, this.runtime.modelName);
      this.lifecycle = 'ready';
    } catch (err) {
      this.lifecycle = 'failed';
      this.readiness.set('model_loaded', false, `failed to attach: ${(err as Error).message}`);
      throw err;
    }
  }

  /**
   * A request another event loop of this process finished or refused (it logged it): for the
   * observers here (the metrics live on the main thread).
   */
  observeRemote(event: { finished: RequestRecord } | { rejected: string }): void {
    for (const o of this.observers) {
      this.safely(() => ('finished' in event ? o.finished(event.finished) : o.rejected(event.rejected)));
    }
  }

  /** Adds an observer of finished and rejected requests (metrics); call before start(). */
  observe(observer: RuntimeObserver): void {
    this.observers.push(observer);
  }

  private readonly fanout: RuntimeObserver = {
    finished: (record) => {
      this.logFinished(record);
      for (const o of this.observers) this.safely(() => o.finished(record));
    },
    rejected: (code) => {
      for (const o of this.observers) this.safely(() => o.rejected(code));
    },
    forward: (tokens, seqs) => {
      for (const o of this.observers) if (o.forward) this.safely(() => o.forward?.(tokens, seqs));
    },
    warmupDone: () => {
      for (const o of this.observers) if (o.warmupDone) this.safely(() => o.warmupDone?.());
    },
  };

  /** 'not started', 'loading', 'warming up', 'ready' or 'failed'. */
  get state(): string {
    return this.lifecycle;
  }

  /** True while the start-up warmup runs (its engine steps are not client traffic). */
  get warmingUp(): boolean {
    return this.lifecycle === 'warming up';
  }

  private safely(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.logger.error({ err }, 'request observer failed');
    }
  }

  /** One structured line per finished request (Loki): ids, token counts, timings in ms. */
  private logFinished(r: RequestRecord): void {
    const toMs = (s: number | undefined) => (s === undefined ? undefined : Math.round(s * 1e6) / 1e3);
    // Warmup requests are summed up by 'warmup done'; one line each only at debug level.
    this.logger[r.warmup ? 'debug' : 'info'](
      {
        request_id: r.requestId,
        tenant: r.tenant,
        priority: r.priority,
        prompt_tokens: r.promptTokens,
        output_tokens: r.outputTokens,
        ttft_ms: toMs(r.ttft),
        e2e_ms: toMs(r.e2e),
        queue_ms: toMs(r.queueTime),
        prefill_ms: toMs(r.prefillTime),
        decode_ms: toMs(r.decodeTime),
        finish_reason: r.finishReason,
        ...(r.warmup ? { warmup: true } : {}),
      },
      'request finished',
    );
  }

  /** The runtime for a request; 503 STRATA_NOT_READY while loading, warming up or failed. */
  get(): InferenceRuntime {
    if (this.runtime && this.lifecycle === 'ready') return this.runtime;
    throw new StrataError(
      'STRATA_NOT_READY',
      `the model is not ready (${this.lifecycle}); see /health/ready`,
    );
  }

  /** The model's load time, bytes and rate, once loaded. */
  get loadReport(): LoadReport | undefined {
    return this.report;
  }

  /** Loaded, even if still warming up (metrics and load reporting use it). */
  get loaded(): InferenceRuntime | undefined {
    return this.runtime;
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.runtime?.close();
  }
}
