// Token buckets per tenant and quota, refilled continuously: a limit of L per minute holds at
// most L and regains L/60,000 per ms. The same arithmetic runs in memory here and atomically in
// Redis (redis-store.ts), so both stores answer alike.

export const WINDOW_MS = 60_000;

export interface Limits {
  /** 0 = unlimited. */
  requestsPerMinute: number;
  tokensPerMinute: number;
}

export interface BucketState {
  limit: number;
  /** Whole units left now; negative after a charge larger than what was left. */
  remaining: number;
  /** Until the bucket is full again, in ms. */
  resetMs: number;
}

export interface Admission {
  allowed: boolean;
  /** The quota that refused the request. */
  refusedBy?: 'requests' | 'tokens';
  /** When refused: until the refusing bucket holds one unit again, in ms. */
  retryAfterMs: number;
  /** Undefined for an unlimited quota. */
  requests: BucketState | undefined;
  tokens: BucketState | undefined;
}

export interface QuotaStore {
  /** Takes one request from the tenant's request bucket if both buckets hold at least one unit. */
  admit(tenant: string, limits: Limits): Promise<Admission>;
  /** Removes tokens actually used (may go below zero: the debt delays the next admission). */
  charge(tenant: string, tokens: number, tokensPerMinute: number): Promise<BucketState | undefined>;
  close(): Promise<void>;
}

/** A bucket's level at `now` given its level `value` at `since` (absent = never used = full). */
export function refill(value: number | undefined, since: number, now: number, limit: number): number {
  if (value === undefined) return limit;
  return Math.min(limit, value + (Math.max(0, now - since) * limit) / WINDOW_MS);
}

export function state(value: number, limit: number): BucketState {
  return {
    limit,
    remaining: Math.floor(value),
    resetMs: Math.ceil(((limit - value) * WINDOW_MS) / limit),
  };
}

/** Time until a bucket at `value` holds one unit, in ms. */
export function untilOne(value: number, limit: number): number {
  return Math.max(1, Math.ceil(((1 - value) * WINDOW_MS) / limit));
}
