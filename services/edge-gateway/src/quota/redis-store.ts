// Quotas shared by every edge replica: the bucket arithmetic of bucket.ts in Lua, so a check and
// its update are one atomic step, timed by Redis' clock (replicas' clocks may differ). Keys
// `strata:quota:{tenant}:req|tok` share a hash slot (Redis Cluster) and expire once the bucket
// would be full again. The client fails fast while Redis is down (@strata/common failFastRedis).
import { closeRedis, type FailFastRedisOptions, failFastRedis, waitRedisReady } from '@strata/common';
import type { Redis, Result } from 'ioredis';
import { type Admission, type BucketState, type Limits, type QuotaStore, WINDOW_MS } from './bucket.js';

// Shared by both scripts: the time, and loading / saving one bucket.
const BUCKET_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function level(key, limit)
  local s = redis.call('HMGET', key, 'v', 'at')
  local v, at = tonumber(s[1]), tonumber(s[2])
  if v == nil or at == nil then return limit end
  return math.min(limit, v + math.max(0, now - at) * limit / ${WINDOW_MS})
end
local function save(key, v, limit)
  if v >= limit then redis.call('DEL', key) return end
  redis.call('HSET', key, 'v', tostring(v), 'at', now)
  redis.call('PEXPIRE', key, math.ceil((limit - v) * ${WINDOW_MS} / limit) + 1000)
end
local function reset(v, limit) return math.ceil((limit - v) * ${WINDOW_MS} / limit) end
local function untilOne(v, limit) return math.max(1, math.ceil((1 - v) * ${WINDOW_MS} / limit)) end
`;

// KEYS: request bucket, token bucket. ARGV: rpm, tpm (0 = unlimited).
// Returns {allowed, refused (0 none, 1 requests, 2 tokens), retryAfterMs,
//          reqRemaining, reqResetMs, tokRemaining, tokResetMs}; remaining is -1 when unlimited.
const ADMIT_LUA = `${BUCKET_LUA}
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local req = rpm > 0 and level(KEYS[1], rpm) or nil
local tok = tpm > 0 and level(KEYS[2], tpm) or nil
local refused, retry = 0, 0
if req ~= nil and req < 1 then refused, retry = 1, untilOne(req, rpm)
elseif tok ~= nil and tok < 1 then refused, retry = 2, untilOne(tok, tpm) end
if req ~= nil then
  if refused == 0 then req = req - 1 end
  save(KEYS[1], req, rpm)
end
return {refused == 0 and 1 or 0, refused, retry,
  req ~= nil and math.floor(req) or -1, req ~= nil and reset(req, rpm) or 0,
  tok ~= nil and math.floor(tok) or -1, tok ~= nil and reset(tok, tpm) or 0}`;

// KEYS: token bucket. ARGV: tpm, tokens used. Returns {remaining, resetMs}.
const CHARGE_LUA = `${BUCKET_LUA}
local tpm, used = tonumber(ARGV[1]), tonumber(ARGV[2])
local v = level(KEYS[1], tpm) - used
save(KEYS[1], v, tpm)
return {math.floor(v), reset(v, tpm)}`;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    strataQuotaAdmit(reqKey: string, tokKey: string, rpm: number, tpm: number): Result<number[], Context>;
    strataQuotaCharge(tokKey: string, tpm: number, used: number): Result<number[], Context>;
  }
}

export interface RedisQuotaStoreOptions extends Omit<FailFastRedisOptions, 'commandTimeoutMs'> {
  url: string;
  /** Per-command timeout in ms. Default 100: a quota check must never hold a request long. */
  commandTimeoutMs?: number;
}

const keys = (tenant: string) => [`strata:quota:{${tenant}}:req`, `strata:quota:{${tenant}}:tok`] as const;

export class RedisQuotaStore implements QuotaStore {
  readonly client: Redis;

  constructor(options: RedisQuotaStoreOptions) {
    this.client = failFastRedis(options.url, {
      ...options,
      commandTimeoutMs: options.commandTimeoutMs ?? 100,
    });
    this.client.defineCommand('strataQuotaAdmit', { numberOfKeys: 2, lua: ADMIT_LUA });
    this.client.defineCommand('strataQuotaCharge', { numberOfKeys: 1, lua: CHARGE_LUA });
  }

  /** Resolves once connected (or rejects after timeoutMs). */
  waitReady(timeoutMs = 2_000): Promise<void> {
    return waitRedisReady(this.client, timeoutMs);
  }

  async admit(tenant: string, limits: Limits): Promise<Admission> {
    const [req, tok] = keys(tenant);
    const r = await this.client.strataQuotaAdmit(req, tok, limits.requestsPerMinute, limits.tokensPerMinute);
    const [allowed, refused, retryAfterMs, reqLeft, reqReset, tokLeft, tokReset] = r as [
      number,
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    const bucket = (limit: number, remaining: number, resetMs: number): BucketState | undefined =>
      limit > 0 ? { limit, remaining, resetMs } : undefined;
    return {
      allowed: allowed === 1,
      ...(refused === 1
        ? { refusedBy: 'requests' as const }
        : refused === 2
          ? { refusedBy: 'tokens' as const }
          : {}),
      retryAfterMs,
      requests: bucket(limits.requestsPerMinute, reqLeft, reqReset),
      tokens: bucket(limits.tokensPerMinute, tokLeft, tokReset),
    };
  }

  async charge(tenant: string, tokens: number, tokensPerMinute: number): Promise<BucketState | undefined> {
    if (tokensPerMinute <= 0) return undefined;
    const [remaining, resetMs] = (await this.client.strataQuotaCharge(
      keys(tenant)[1],
      tokensPerMinute,
      tokens,
    )) as [number, number];
    return { limit: tokensPerMinute, remaining, resetMs };
  }

  close(): Promise<void> {
    return closeRedis(this.client);
  }
}
