// Session affinity for the router (docs/architecture.md, Routing): x-session-id → backend,
// refreshed on use, forgotten when the backend leaves. It never throws into the request path and never waits long:
// a store error or a slow store resolves to 'unavailable' (route without affinity), counted in
// strata_router_affinity_store_errors_total and logged at most once per interval.
import { Counter, type Logger, type Registry } from '@strata/common';
import type { SessionStore } from './store.js';

export type AffinityLookup =
  /** The session's backend, still live; its TTL was refreshed. */
  | { result: 'hit'; backend: string }
  /** No backend remembered for this session. */
  | { result: 'miss' }
  /** The remembered backend is no longer live; the mapping was forgotten. */
  | { result: 'stale'; backend: string }
  /** The store failed or was too slow: route without affinity. */
  | { result: 'unavailable' };

export type AffinityResult = AffinityLookup['result'];

export interface AffinityServiceOptions {
  store: SessionStore;
  registry: Registry;
  logger: Logger;
  /** Session TTL in ms, refreshed on each use. Default 30 minutes. */
  ttlMs?: number;
  /** Upper bound on one store call in ms, on top of the store's own timeouts. Default 250. */
  deadlineMs?: number;
  /** At most one store-error log line per this many ms. Default 10,000. */
  errorLogIntervalMs?: number;
  /** Longest session id used as a key; longer ones route without affinity. Default 256. */
  maxSessionLength?: number;
}

type Op = 'lookup' | 'remember' | 'forget';

export class AffinityService {
  private readonly store: SessionStore;
  private readonly logger: Logger;
  private readonly ttlMs: number;
  private readonly deadlineMs: number;
  private readonly errorLogIntervalMs: number;
  private readonly maxSessionLength: number;
  private readonly results: Counter<'result'>;
  private readonly storeErrors: Counter<'op'>;
  private lastErrorLogAt = Number.NEGATIVE_INFINITY;
  private suppressedErrors = 0;
  private failing = false;

  constructor(options: AffinityServiceOptions) {
    this.store = options.store;
    this.logger = options.logger;
    this.ttlMs = options.ttlMs ?? 30 * 60_000;
    this.deadlineMs = options.deadlineMs ?? 250;
    this.errorLogIntervalMs = options.errorLogIntervalMs ?? 10_000;
    this.maxSessionLength = options.maxSessionLength ?? 256;
    this.results = counter(options.registry, {
      name: 'strata_router_affinity_total',
      help: 'Session affinity lookups by result (hit, miss, stale: backend gone, unavailable: store failed).',
      labelNames: ['result'],
    });
    this.storeErrors = counter(options.registry, {
      name: 'strata_router_affinity_store_errors_total',
      help: 'Session store calls that failed or timed out; routing went on without affinity.',
      labelNames: ['op'],
    });
  }

  /** The session's backend if it is still among liveBackends; never rejects. */
  async lookup(
    session: string,
    liveBackends: ReadonlySet<string> | readonly string[],
  ): Promise<AffinityLookup> {
    const outcome = await this.lookupInner(session, liveBackends);
    this.results.inc({ result: outcome.result });
    return outcome;
  }

  /** Remember (or reassign) the session's backend; never rejects. */
  async remember(session: string, backend: string): Promise<'ok' | 'unavailable'> {
    if (!this.usable(session)) return 'ok';
    return (await this.call('remember', () => this.store.set(session, backend, this.ttlMs))).ok
      ? 'ok'
      : 'unavailable';
  }

  /** Forget the session; never rejects. */
  async forget(session: string): Promise<'ok' | 'unavailable'> {
    if (!this.usable(session)) return 'ok';
    return (await this.call('forget', () => this.store.delete(session))).ok ? 'ok' : 'unavailable';
  }

  private async lookupInner(
    session: string,
    liveBackends: ReadonlySet<string> | readonly string[],
  ): Promise<AffinityLookup> {
    if (!this.usable(session)) return { result: 'miss' };
    const got = await this.call('lookup', () => this.store.getAndTouch(session, this.ttlMs));
    if (!got.ok) return { result: 'unavailable' };
    const backend = got.value;
    if (backend === undefined) return { result: 'miss' };
    const live = Array.isArray(liveBackends)
      ? liveBackends.includes(backend)
      : (liveBackends as ReadonlySet<string>).has(backend);
    if (live) return { result: 'hit', backend };
    // The backend left: forget it (only if no other replica reassigned it meanwhile). The
    // caller remembers the new choice; a failure here is counted but changes nothing.
    await this.call('forget', () => this.store.deleteIf(session, backend));
    return { result: 'stale', backend };
  }

  private usable(session: string): boolean {
    return session.length > 0 && session.length <= this.maxSessionLength;
  }

  private async call<T>(op: Op, fn: () => Promise<T>): Promise<{ ok: true; value: T } | { ok: false }> {
    let timer: NodeJS.Timeout | undefined;
    try {
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`session store ${op} took longer than ${this.deadlineMs} ms`)),
          this.deadlineMs,
        );
      });
      const value = await Promise.race([fn(), deadline]);
      if (this.failing) {
        this.failing = false;
        this.logger.info(
          { suppressed_errors: this.suppressedErrors },
          'session affinity store recovered; affinity is back',
        );
        this.suppressedErrors = 0;
        this.lastErrorLogAt = Number.NEGATIVE_INFINITY;
      }
      return { ok: true, value };
    } catch (err) {
      this.storeErrors.inc({ op });
      this.failing = true;
      const now = Date.now();
      if (now - this.lastErrorLogAt >= this.errorLogIntervalMs) {
        this.logger.warn(
          { err, op, suppressed_errors: this.suppressedErrors },
          'session affinity store unavailable; routing without affinity',
        );
        this.lastErrorLogAt = now;
        this.suppressedErrors = 0;
      } else {
        this.suppressedErrors += 1;
      }
      return { ok: false };
    } finally {
      clearTimeout(timer);
    }
  }
}

// Replicas in one process (tests) or a rebuilt service may share a registry: reuse the metric.
function counter<L extends string>(
  registry: Registry,
  config: { name: string; help: string; labelNames: L[] },
): Counter<L> {
  const existing = registry.getSingleMetric(config.name);
  if (existing instanceof Counter) return existing as Counter<L>;
  return new Counter({ ...config, registers: [registry] });
}
