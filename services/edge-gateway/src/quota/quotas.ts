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
  const { requests, tokens } = admission;
  if (requests) {
    out['x-ratelimit-limit-requests'] = String(requests.limit);
    out['x-ratelimit-remaining-requests'] = String(Math.max(0, requests.remaining));
    out['x-ratelimit-reset-requests'] = `${(requests.resetMs / 1000).toFixed(3)}s`;
  }
  if (tokens) {
    out['x-ratelimit-limit-tokens'] = String(tokens.limit);
    out['x-ratelimit-remaining-tokens'] = String(Math.max(0, tokens.remaining));
    out['x-ratelimit-reset-tokens'] = `${(tokens.resetMs / 1000).toFixed(3)}s`;
  }
  return out;
}

/** A tenant's share of each quota in use, as of its last check. */
interface UsedRatios {
  requests: number | undefined;
  tokens: number | undefined;
}

export class Quotas {
  private readonly charged: Counter<'tenant'>;
  private readonly storeErrors: Counter<'op'>;
  private readonly storeUp: Gauge;
  private up = true;
  // Kept here per request and copied into the gauge when it is scraped: a labelled gauge update
  // hashes its labels and allocates, twice or three times per request.
  private readonly ratios = new Map<string, UsedRatios>();

  constructor(private readonly options: QuotasOptions) {
    const registers = [options.registry];
    const ratios = this.ratios;
    // Registered with the registry, which scrapes it (collect).
    new Gauge({
      name: 'strata_edge_quota_used_ratio',
      help: 'Share of a tenant quota in use (0 = bucket full, 1 = empty or in debt), as of its last check.',
      labelNames: ['tenant', 'quota'],
      registers,
      collect() {
        for (const [tenant, used] of ratios) {
          if (used.requests !== undefined) this.set({ tenant, quota: 'requests' }, used.requests);
          if (used.tokens !== undefined) this.set({ tenant, quota: 'tokens' }, used.tokens);
        }
      },
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
    let used = this.ratios.get(tenant);
    if (used === undefined) {
      used = { requests: undefined, tokens: undefined };
      this.ratios.set(tenant, used);
    }
    used[quota] = Math.min(1, Math.max(0, 1 - bucket.remaining / bucket.limit));
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
