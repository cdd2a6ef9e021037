// STRATA_HTTP_WORKERS: more event loops serving HTTP on the one port and the one engine. The
// main thread loads the model, warms it up and serves as before; then it starts httpWorkers - 1
// worker threads (http-worker.ts), each attaching to the engine (Engine.attach) and listening on
// the same port with SO_REUSEPORT, so the kernel spreads connections among the loops and each
// loop formats and writes only its own streams' tokens (the engine's StepRouter hands each
// thread its own). Admission counts every loop's requests (one shared counter); request
// metrics are observed on the main thread (workers send each finished request's record), and
// GET /metrics on any loop answers with every loop's registry summed. Draining the main thread
// drains the workers at once; the engine closes after all of them are done.
import { Worker } from 'node:worker_threads';
import { AggregatorRegistry, type Logger, type Readiness, type Registry } from '@strata/common';
import type { Config } from '../config.js';
import type { ModelHost } from './model-host.js';
import type { RequestRecord, SharedRuntime } from './runtime.js';

/** What a worker starts with (workerData). */
export interface HttpWorkerData {
  index: number;
  config: Config;
  shared: SharedRuntime;
  host: string;
  port: number;
}

/** Main thread -> worker. */
export type ToWorker =
  | { type: 'drain' }
  | { type: 'metrics-json'; id: number }
  | { type: 'metrics-text'; id: number; text: string };

/** Worker -> main thread. */
export type FromWorker =
  /** clockOffsetMs: the monotonic clock minus the worker's performance.now(), in ms. */
  | { type: 'listening'; address: string; clockOffsetMs: number }
  | { type: 'failed'; message: string }
  | { type: 'finished'; record: RequestRecord }
  | { type: 'rejected'; code: string }
  | { type: 'metrics-json'; id: number; json: unknown[] }
  | { type: 'metrics-text'; id: number }
  | { type: 'drained'; outcome: string };

/** A worker that does not answer a scrape within this is left out of it. */
const SCRAPE_TIMEOUT_MS = 2_000;
/**
 * A worker that exits unasked is started again after this, doubled for each exit in a row
 * without its replacement listening, up to RESTART_DELAY_MAX_MS.
 */
const RESTART_DELAY_MS = 1_000;
const RESTART_DELAY_MAX_MS = 30_000;

interface Running {
  worker: Worker;
  listening: boolean;
  drained: Promise<void>;
  /** Added to the worker's performance.now() moments to place them on this thread's. */
  clockShiftMs: number;
}

/** The monotonic clock (CLOCK_MONOTONIC, the same on every thread) minus performance.now(), in ms. */
export function clockOffsetMs(): number {
  return Number(process.hrtime.bigint()) / 1e6 - performance.now();
}

/** A worker's record with its moments moved onto this thread's performance.now() clock. */
function shifted(record: RequestRecord, shiftMs: number): RequestRecord {
  return {
    ...record,
    arrivedAt: record.arrivedAt + shiftMs,
    sampledAt: record.sampledAt.map((t) => t + shiftMs),
  };
}

export interface HttpWorkerPoolOptions {
  config: Config;
  logger: Logger;
  readiness: Readiness;
  host: ModelHost;
  /** The main thread's registry (the engine metrics and its own HTTP metrics). */
  registry: Registry;
  /** The worker script: http-worker.js beside this module (dist/, or the device bundle) by default. */
  script?: URL;
}

export class HttpWorkerPool {
  private readonly workers: (Running | undefined)[];
  /** Exits in a row of each worker without listening since (the restart back-off). */
  private readonly failures: number[];
  private readonly scrapes = new Map<number, (json: unknown[] | undefined) => void>();
  private nextScrape = 1;
  private started: { shared: SharedRuntime; host: string; port: number } | undefined;
  private draining: Promise<void> | undefined;
  private readonly script: URL;

  constructor(private readonly options: HttpWorkerPoolOptions) {
    this.workers = new Array(options.config.httpWorkers - 1).fill(undefined);
    this.failures = this.workers.map(() => 0);
    this.script = options.script ?? new URL('./http-worker.js', import.meta.url);
    if (this.workers.length > 0) {
      options.readiness.set(
        'http_workers',
        false,
        `waiting for the model before starting ${this.workers.length}`,
      );
      options.readiness.onDraining(() => void this.drain());
    }
  }

  /** Worker threads this pool runs (httpWorkers - 1). */
  get size(): number {
    return this.workers.length;
  }

  /** Starts every worker on `shared` and resolves once all of them listen on host:port. */
  async start(shared: SharedRuntime, host: string, port: number): Promise<void> {
    if (this.workers.length === 0 || this.started) return;
    this.started = { shared, host, port };
    this.options.readiness.set('http_workers', false, `starting ${this.workers.length}`);
    await Promise.all(this.workers.map((_, index) => this.spawn(index)));
  }

  /**
   * GET /metrics: the main thread's registry and every worker's, summed (counters and histograms
   * add up; the engine's gauges exist on the main thread only).
   */
  async exposition(): Promise<string> {
    const theirs = (await Promise.all(this.workers.map((running) => this.scrape(running)))).filter(
      (json): json is unknown[] => json !== undefined,
    );
    // No worker answered (none started yet): the main thread's registry alone, collected once.
    if (theirs.length === 0) return this.options.registry.metrics();
    const all = [await this.options.registry.getMetricsAsJSON(), ...theirs];
    return AggregatorRegistry.aggregate(all as Parameters<typeof AggregatorRegistry.aggregate>[0]).metrics();
  }

  /** Drains every worker (each stops accepting, finishes its streams, detaches); idempotent. */
  drain(): Promise<void> {
    this.draining ??= (async () => {
      const waits = this.workers.map((running) => {
        if (!running) return Promise.resolve();
        running.worker.postMessage({ type: 'drain' } satisfies ToWorker);
        return running.drained;
      });
      await Promise.all(waits);
    })();
    return this.draining;
  }

  private async scrape(running: Running | undefined): Promise<unknown[] | undefined> {
    if (!running?.listening) return undefined;
    const id = this.nextScrape++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.scrapes.delete(id);
        this.options.logger.warn(
          { http_worker: this.workers.indexOf(running) + 1 },
          'metrics: a worker did not answer',
        );
        resolve(undefined);
      }, SCRAPE_TIMEOUT_MS);
      this.scrapes.set(id, (json) => {
        clearTimeout(timer);
        resolve(json);
      });
      running.worker.postMessage({ type: 'metrics-json', id } satisfies ToWorker);
    });
  }

  private spawn(index: number): Promise<void> {
    const started = this.started;
    if (!started) return Promise.resolve();
    const data: HttpWorkerData = { index: index + 1, config: this.options.config, ...started };
    const worker = new Worker(this.script, { workerData: data, name: `strata-http-${index + 1}` });
    let drained!: () => void;
    const running: Running = {
      worker,
      listening: false,
      clockShiftMs: 0,
      drained: new Promise((resolve) => {
        drained = resolve;
      }),
    };
    this.workers[index] = running;
    const log = this.options.logger.child({ http_worker: index + 1 });
    return new Promise<void>((resolve) => {
      worker.on('message', (message: FromWorker) => {
        switch (message.type) {
          case 'listening':
            running.listening = true;
            running.clockShiftMs = message.clockOffsetMs - clockOffsetMs();
            this.failures[index] = 0;
            log.info({ address: message.address, thread_id: worker.threadId }, 'http worker listening');
            this.updateReadiness();
            resolve();
            break;
          case 'failed':
            log.error({ reason: message.message }, 'http worker failed to start');
            resolve();
            break;
          case 'finished':
            this.options.host.observeRemote({ finished: shifted(message.record, running.clockShiftMs) });
            break;
          case 'rejected':
            this.options.host.observeRemote({ rejected: message.code });
            break;
          case 'metrics-json':
            this.scrapes.get(message.id)?.(message.json);
            this.scrapes.delete(message.id);
            break;
          case 'metrics-text':
            void this.exposition().then(
              (text) => worker.postMessage({ type: 'metrics-text', id: message.id, text } satisfies ToWorker),
              (err: unknown) => {
                log.error({ err }, 'metrics: summing the registries failed');
                worker.postMessage({ type: 'metrics-text', id: message.id, text: '' } satisfies ToWorker);
              },
            );
            break;
          case 'drained':
            log.info({ outcome: message.outcome }, 'http worker drained');
            drained();
            break;
        }
      });
      worker.on('error', (err) => log.error({ err }, 'http worker failed'));
      worker.on('exit', (code) => {
        running.listening = false;
        drained();
        resolve();
        if (this.draining) return;
        // Unasked: its connections are gone; a new one takes its place on the port.
        const failures = this.failures[index] ?? 0;
        this.failures[index] = failures + 1;
        const delayMs = Math.min(RESTART_DELAY_MS * 2 ** failures, RESTART_DELAY_MAX_MS);
        log.error({ code, restart_in_ms: delayMs }, 'http worker exited; starting another');
        this.updateReadiness(`worker ${index + 1} exited with code ${code}; restarting`);
        setTimeout(() => {
          if (!this.draining) void this.spawn(index);
        }, delayMs).unref();
      });
    });
  }

  private updateReadiness(problem?: string): void {
    const listening = this.workers.filter((w) => w?.listening).length;
    const all = this.workers.length;
    if (problem) this.options.readiness.set('http_workers', false, problem);
    else this.options.readiness.set('http_workers', listening === all, `${listening} of ${all} listening`);
  }
}
