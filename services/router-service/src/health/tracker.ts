// Backend health and load for the picker (docs/architecture.md: Wire contracts, Routing):
// - active probes: GET /health/ready every probeIntervalMs; ready means a 200;
// - load polling: GET /load every loadIntervalMs, parsed with the shared contract
//   (@strata/common loadReportSchema; extra fields are ignored) and kept with its receive time
//   (`at`) so the picker can treat old load as unknown (routing/backend-state.ts, freshLoad);
// - passive ejection: callers report request failures (connection error, 5xx) and successes;
//   failureThreshold consecutive failures eject the backend for a backoff that doubles with each
//   ejection up to ejectionMaxMs. When the backoff ends the backend is half-open: healthy again,
//   and the next failure (a request's, or a probe/poll that cannot reach it) ejects it again
//   with a longer backoff, while a reported success closes it.
// Probe and poll requests that fail outright (connect error, reset, timeout) count as failures;
// a non-200 /health/ready only means "not ready". A probe that fails outright makes the backend
// not ready only after failureThreshold in a row (as a Kubernetes readiness probe's
// failureThreshold): one slow answer on a busy node is not a verdict, and an unreachable backend
// is ejected sooner by the load polls' failures anyway. Not ready is also taken from a /load report
// that says ready: false (it is polled ten times as often), but only a probe makes it ready.
import {
  Counter,
  Gauge,
  type LoadReport,
  type Logger,
  loadReportSchema,
  type Registry,
} from '@strata/common';
import { Agent, request } from 'undici';
import type { BackendLoad } from '../routing/backend-state.js';

export interface BackendEndpoint {
  name: string;
  /** Base URL, e.g. http://10.0.0.7:8000 */
  url: string;
}

export interface BackendStatus {
  name: string;
  url: string;
  /** Last /health/ready probe answered 200 and the last /load report did not say otherwise. */
  ready: boolean;
  /** Not ejected by passive health checking. */
  healthy: boolean;
  /** Last load report and when it was received; absent before the first one. */
  load?: BackendLoad;
}

export interface BackendTrackerOptions {
  backends: readonly BackendEndpoint[];
  registry: Registry;
  logger: Logger;
  /** Default 1,000 ms. */
  probeIntervalMs?: number;
  /** Default 100 ms. */
  loadIntervalMs?: number;
  /** Whole-request timeout of a probe. Default 500 ms. */
  probeTimeoutMs?: number;
  /** Whole-request timeout of a load poll. Default 250 ms. */
  loadTimeoutMs?: number;
  /** Consecutive failures that eject a backend. Default 3. */
  failureThreshold?: number;
  /** First ejection's length; each further one doubles it. Default 1,000 ms. */
  ejectionBaseMs?: number;
  /** Longest ejection. Default 10,000 ms. */
  ejectionMaxMs?: number;
  /** Clock in epoch ms. */
  now?: () => number;
}

interface State {
  endpoint: BackendEndpoint;
  probeUrl: string;
  loadUrl: string;
  probeReady: boolean;
  /** Probes in a row that failed outright (no answer). */
  probeFailures: number;
  loadSaysReady: boolean | undefined;
  ready: boolean;
  load: BackendLoad | undefined;
  consecutiveFailures: number;
  /** Ejections since the last reported success: > 0 while ejected or half-open. */
  ejectionLevel: number;
  ejectedUntil: number;
  probing: boolean;
  polling: boolean;
}

export class BackendTracker {
  private readonly states = new Map<string, State>();
  private readonly logger: Logger;
  private readonly now: () => number;
  private readonly probeIntervalMs: number;
  private readonly loadIntervalMs: number;
  private readonly probeTimeoutMs: number;
  private readonly loadTimeoutMs: number;
  private readonly failureThreshold: number;
  private readonly ejectionBaseMs: number;
  private readonly ejectionMaxMs: number;
  private readonly ejections: Counter<'backend'>;
  private readonly readyGauge: Gauge<'backend'>;
  private readonly agent: Agent;
  private readonly abort = new AbortController();
  private readonly inFlight = new Set<Promise<void>>();
  private probeTimer: NodeJS.Timeout | undefined;
  private loadTimer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(options: BackendTrackerOptions) {
    this.logger = options.logger;
    this.now = options.now ?? Date.now;
    this.probeIntervalMs = options.probeIntervalMs ?? 1_000;
    this.loadIntervalMs = options.loadIntervalMs ?? 100;
    this.probeTimeoutMs = options.probeTimeoutMs ?? 500;
    this.loadTimeoutMs = options.loadTimeoutMs ?? 250;
    this.failureThreshold = options.failureThreshold ?? 3;
    this.ejectionBaseMs = options.ejectionBaseMs ?? 1_000;
    this.ejectionMaxMs = options.ejectionMaxMs ?? 10_000;
    this.ejections = metric(
      options.registry,
      'strata_router_backend_ejections_total',
      () =>
        new Counter({
          name: 'strata_router_backend_ejections_total',
          help: 'Times a backend was ejected after consecutive failures.',
          labelNames: ['backend'],
          registers: [options.registry],
        }),
    );
    this.readyGauge = metric(
      options.registry,
      'strata_router_backend_ready',
      () =>
        new Gauge({
          name: 'strata_router_backend_ready',
          help: '1 while the backend answers /health/ready with 200, else 0.',
          labelNames: ['backend'],
          registers: [options.registry],
        }),
    );
    this.agent = new Agent({
      connect: { timeout: Math.min(this.probeTimeoutMs, 1_000) },
      keepAliveTimeout: 10_000,
      connections: 4,
    });
    this.setBackends(options.backends);
  }

  /** Start probing and polling (a first round right away). */
  start(): void {
    if (this.stopped) throw new Error('BackendTracker was stopped');
    if (this.probeTimer) return;
    this.probeTimer = setInterval(() => this.probeAll(), this.probeIntervalMs);
    this.loadTimer = setInterval(() => this.pollAll(), this.loadIntervalMs);
    this.probeAll();
    this.pollAll();
  }

  /** Stop timers, abort requests in flight and close connections. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.probeTimer);
    clearInterval(this.loadTimer);
    this.probeTimer = undefined;
    this.loadTimer = undefined;
    this.abort.abort();
    await Promise.allSettled([...this.inFlight]);
    await this.agent.close();
  }

  /** One probe and one load poll of every backend; resolves when they are done. */
  async refresh(): Promise<void> {
    await Promise.all([...this.states.values()].flatMap((s) => [this.probe(s), this.poll(s)]));
  }

  /** Replace the backend list (discovery update); known backends keep their state. */
  setBackends(backends: readonly BackendEndpoint[]): void {
    const wanted = new Map(backends.map((b) => [b.name, b]));
    for (const [name, state] of this.states) {
      const next = wanted.get(name);
      if (!next || next.url !== state.endpoint.url) {
        this.states.delete(name);
        this.readyGauge.remove({ backend: name });
      }
    }
    for (const endpoint of backends) {
      if (this.states.has(endpoint.name)) continue;
      const base = endpoint.url.endsWith('/') ? endpoint.url : `${endpoint.url}/`;
      this.states.set(endpoint.name, {
        endpoint: { name: endpoint.name, url: endpoint.url },
        probeUrl: new URL('health/ready', base).toString(),
        loadUrl: new URL('load', base).toString(),
        probeReady: false,
        probeFailures: 0,
        loadSaysReady: undefined,
        ready: false,
        load: undefined,
        consecutiveFailures: 0,
        ejectionLevel: 0,
        ejectedUntil: 0,
        probing: false,
        polling: false,
      });
      this.readyGauge.set({ backend: endpoint.name }, 0);
    }
  }

  /** A request to this backend failed (connection error or 5xx). */
  reportFailure(name: string): void {
    const state = this.states.get(name);
    if (state) this.failure(state, 'request');
  }

  /** A request to this backend succeeded: closes a half-open backend and resets the backoff. */
  reportSuccess(name: string): void {
    const state = this.states.get(name);
    if (!state) return;
    state.consecutiveFailures = 0;
    if (state.ejectionLevel > 0 && this.now() >= state.ejectedUntil) {
      state.ejectionLevel = 0;
      this.logger.info({ backend: name }, 'backend recovered after ejection');
    }
  }

  snapshot(): BackendStatus[] {
    const now = this.now();
    return [...this.states.values()].map((s) => this.status(s, now));
  }

  get(name: string): BackendStatus | undefined {
    const state = this.states.get(name);
    return state ? this.status(state, this.now()) : undefined;
  }

  private status(s: State, now: number): BackendStatus {
    const out: BackendStatus = {
      name: s.endpoint.name,
      url: s.endpoint.url,
      ready: s.ready,
      healthy: now >= s.ejectedUntil,
    };
    if (s.load) out.load = s.load;
    return out;
  }

  private failure(state: State, source: 'request' | 'probe' | 'load'): void {
    const now = this.now();
    if (now < state.ejectedUntil) return; // already ejected
    state.consecutiveFailures += 1;
    // Half-open (ejected before, no success since): one failure is enough.
    if (state.ejectionLevel === 0 && state.consecutiveFailures < this.failureThreshold) return;
    state.ejectionLevel += 1;
    const backoffMs = Math.min(this.ejectionBaseMs * 2 ** (state.ejectionLevel - 1), this.ejectionMaxMs);
    state.ejectedUntil = now + backoffMs;
    state.consecutiveFailures = 0;
    this.ejections.inc({ backend: state.endpoint.name });
    this.logger.warn(
      { backend: state.endpoint.name, source, backoff_ms: backoffMs, ejection: state.ejectionLevel },
      'backend ejected after failures',
    );
  }

  private setReady(state: State): void {
    const ready = state.probeReady && state.loadSaysReady !== false;
    if (ready === state.ready) return;
    state.ready = ready;
    this.readyGauge.set({ backend: state.endpoint.name }, ready ? 1 : 0);
    this.logger.info({ backend: state.endpoint.name, ready }, ready ? 'backend ready' : 'backend not ready');
  }

  private probeAll(): void {
    for (const state of this.states.values()) void this.probe(state);
  }

  private pollAll(): void {
    for (const state of this.states.values()) void this.poll(state);
  }

  private probe(state: State): Promise<void> {
    if (state.probing || this.stopped) return Promise.resolve();
    state.probing = true;
    return this.track(async () => {
      try {
        const res = await this.httpGet(state.probeUrl, this.probeTimeoutMs);
        await res.body.dump();
        if (this.states.get(state.endpoint.name) !== state) return; // removed meanwhile
        state.probeReady = res.statusCode === 200;
        state.probeFailures = 0;
        if (state.probeReady) state.loadSaysReady = undefined; // the probe is the newer word
      } catch {
        if (this.stopped || this.states.get(state.endpoint.name) !== state) return;
        state.probeFailures += 1;
        if (state.probeFailures >= this.failureThreshold) state.probeReady = false;
        this.failure(state, 'probe');
      } finally {
        state.probing = false;
      }
      this.setReady(state);
    });
  }

  private poll(state: State): Promise<void> {
    if (state.polling || this.stopped) return Promise.resolve();
    state.polling = true;
    return this.track(async () => {
      try {
        const res = await this.httpGet(state.loadUrl, this.loadTimeoutMs);
        if (res.statusCode !== 200) {
          await res.body.dump();
          return;
        }
        const text = await res.body.text();
        if (this.states.get(state.endpoint.name) !== state) return;
        const parsed = loadReportSchema.safeParse(parseJson(text));
        if (!parsed.success) return; // a bad report is ignored: the last load goes stale
        state.load = toBackendLoad(parsed.data, this.now());
        state.loadSaysReady = parsed.data.ready;
        this.setReady(state);
      } catch {
        // Unreachable, reset or timed out: a failure.
        if (this.stopped || this.states.get(state.endpoint.name) !== state) return;
        this.failure(state, 'load');
      } finally {
        state.polling = false;
      }
    });
  }

  private httpGet(url: string, timeoutMs: number): ReturnType<typeof request> {
    return request(url, {
      method: 'GET',
      dispatcher: this.agent,
      // undici's own headers/body timeouts tick coarsely (~1 s): a signal bounds the whole request.
      signal: AbortSignal.any([this.abort.signal, AbortSignal.timeout(timeoutMs)]),
    });
  }

  private track(fn: () => Promise<void>): Promise<void> {
    const p = fn();
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p)).catch(() => {});
    return p;
  }
}

function metric<T>(registry: Registry, name: string, create: () => T): T {
  const existing = registry.getSingleMetric(name);
  return existing ? (existing as unknown as T) : create();
}

// Receive time on the router's clock, not the backend's.
function toBackendLoad(report: LoadReport, at: number): BackendLoad {
  return {
    waiting: report.waiting,
    running: report.running,
    kvUsage: report.kv_usage,
    freeBlocks: report.kv_blocks_free,
    at,
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
