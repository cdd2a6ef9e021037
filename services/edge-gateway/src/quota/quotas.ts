// Per-tenant quotas around a QuotaStore: admission before forwarding (one request, and a token
// bucket that is not in debt), the actual tokens charged after the response, rate-limit headers,
// and what to do while the store is unreachable (fail open or closed, logged and counted).
import { Counter, Gauge, type Logger, type Registry, StrataError } from '@strata/common';
import type { Tenant } from '../auth/tenants.js';
import type { Admission, BucketState, Limits, QuotaStore } from './bucket.js';

export interface QuotasOptions {
  store: QuotaStore;
  defaults: Limits;
  failMode: 'open' | 'closed';
  registry: Registry;
  logger: Logger;
}

export type RateLimitHeaders = Record<string, string>;

/** A 429 that carries the rate-limit headers the client should see with it. */
export class QuotaRefusal extends StrataError {
  constructor(
    code: 'STRATA_RATE_LIMITED' | 'STRATA_QUOTA_EXCEEDED',
    message: string,
    retryAfterSeconds: number,
    readonly headers: RateLimitHeaders,
  ) {
    super(code, message, { retryAfterSeconds });
  }
}

function limitsOf(tenant: Tenant, defaults: Limits): Limits {
  return {
    requestsPerMinute: tenant.requestsPerMinute ?? defaults.requestsPerMinute,
    tokensPerMinute: tenant.tokensPerMinute ?? defaults.tokensPerMinute,
  };
}

// OpenAI's header names; reset is the time until the bucket is full, in seconds.
function headersOf(admission: Pick<Admission, 'requests' | 'tokens'>): RateLimitHeaders {
  const out: RateLimitHeaders = {};
  for (const [kind, bucket] of [
    ['requests', admission.requests],
    ['tokens', admission.tokens],
  ] as const) {
    if (!bucket) continue;
    out[`x-ratelimit-limit-${kind}`] = String(bucket.limit);
    out[`x-ratelimit-remaining-${kind}`] = String(Math.max(0, bucket.remaining));
    out[`x-ratelimit-reset-${kind}`] = `${(bucket.resetMs / 1000).toFixed(3)}s`;
  }
  return out;
}

export class Quotas {
  private readonly usedRatio: Gauge<'tenant' | 'quota'>;
  private readonly charged: Counter<'tenant'>;
  private readonly storeErrors: Counter<'op'>;
  private readonly storeUp: Gauge;
  private up = true;

  constructor(private readonly options: QuotasOptions) {
    const registers = [options.registry];
    this.usedRatio = new Gauge({
      name: 'strata_edge_quota_used_ratio',
      help: 'Share of a tenant quota in use (0 = bucket full, 1 = empty or in debt), as of its last check.',
      labelNames: ['tenant', 'quota'],
      registers,
    });
    this.charged = new Counter({
      name: 'strata_edge_tokens_charged_total',
      help: 'Tokens (prompt + generated, from the usage the backend reported) charged to a tenant.',
      labelNames: ['tenant'],
      registers,
    });
    this.storeErrors = new Counter({
      name: 'strata_edge_quota_store_errors_total',
      help: 'Quota store operations that failed (Redis unreachable or slow), by operation.',
      labelNames: ['op'],
      registers,
    });
    this.storeUp = new Gauge({
      name: 'strata_edge_quota_store_up',
      help: '1 while the last quota store operation succeeded, 0 while the store fails.',
      registers,
    });
    this.storeUp.set(1);
    this.storeErrors.inc({ op: 'admit' }, 0);
    this.storeErrors.inc({ op: 'charge' }, 0);
  }

  /** Admits one request for the tenant or throws the 429 (or 503 when failing closed). */
  async admit(tenant: Tenant): Promise<RateLimitHeaders> {
    const limits = limitsOf(tenant, this.options.defaults);
    if (limits.requestsPerMinute === 0 && limits.tokensPerMinute === 0) return {};
    let admission: Admission;
    try {
      admission = await this.options.store.admit(tenant.name, limits);
      this.storeOk();
    } catch (err) {
      this.storeFailed('admit', err as Error);
      if (this.options.failMode === 'open') return {};
      throw new StrataError('STRATA_QUOTA_UNAVAILABLE', undefined, { retryAfterSeconds: 1 });
    }
    this.observe(tenant.name, 'requests', admission.requests);
    this.observe(tenant.name, 'tokens', admission.tokens);
    const headers = headersOf(admission);
    if (admission.allowed) return headers;
    const retryAfterSeconds = Math.max(1, Math.ceil(admission.retryAfterMs / 1000));
    if (admission.refusedBy === 'tokens') {
      throw new QuotaRefusal(
        'STRATA_QUOTA_EXCEEDED',
        `Tenant "${tenant.name}" used its ${limits.tokensPerMinute} tokens per minute; retry in ${retryAfterSeconds} s.`,
        retryAfterSeconds,
        headers,
      );
    }
    throw new QuotaRefusal(
      'STRATA_RATE_LIMITED',
      `Tenant "${tenant.name}" sent its ${limits.requestsPerMinute} requests per minute; retry in ${retryAfterSeconds} s.`,
      retryAfterSeconds,
      headers,
    );
  }

  /** Charges the tokens a finished request used; never throws (a failed charge is counted). */
  async charge(tenant: Tenant, tokens: number): Promise<void> {
    if (tokens <= 0) return;
    this.charged.inc({ tenant: tenant.name }, tokens);
    const limit = limitsOf(tenant, this.options.defaults).tokensPerMinute;
    if (limit === 0) return;
    try {
      this.observe(tenant.name, 'tokens', await this.options.store.charge(tenant.name, tokens, limit));
      this.storeOk();
    } catch (err) {
      this.storeFailed('charge', err as Error);
    }
  }

  async close(): Promise<void> {
    await this.options.store.close();
  }

  private observe(tenant: string, quota: 'requests' | 'tokens', bucket: BucketState | undefined): void {
    if (!bucket) return;
    this.usedRatio.set({ tenant, quota }, Math.min(1, Math.max(0, 1 - bucket.remaining / bucket.limit)));
  }

  private storeOk(): void {
    if (this.up) return;
    this.up = true;
    this.storeUp.set(1);
    this.options.logger.info('quota store reachable again: quotas enforced');
  }

  private storeFailed(op: 'admit' | 'charge', err: Error): void {
    this.storeErrors.inc({ op });
    if (!this.up) return;
    this.up = false;
    this.storeUp.set(0);
    this.options.logger.error(
      { err: err.message, fail_mode: this.options.failMode },
      this.options.failMode === 'open'
        ? 'quota store unreachable: admitting requests without quotas until it is back'
        : 'quota store unreachable: refusing requests (503) until it is back',
    );
  }
}
