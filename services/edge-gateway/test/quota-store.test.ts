// Both quota stores answer the same table; the Redis one against a real server, shared by two
// clients as two edge replicas would share it.
import { type TestRedis, testRedis } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { QuotaStore } from '../src/quota/bucket.js';
import { MemoryQuotaStore } from '../src/quota/memory-store.js';
import { RedisQuotaStore } from '../src/quota/redis-store.js';

let redis: TestRedis;
const stores: RedisQuotaStore[] = [];
beforeAll(async () => {
  redis = await testRedis();
});
afterAll(async () => {
  await Promise.all(stores.map((s) => s.close()));
  await redis.close();
});

async function redisStore(): Promise<RedisQuotaStore> {
  const store = new RedisQuotaStore({ url: redis.url });
  stores.push(store);
  await store.waitReady();
  return store;
}

let tenantSeq = 0;
// A tenant no other test (or earlier run against a shared Redis) has used.
const freshTenant = () => `t${process.pid}-${Date.now()}-${tenantSeq++}`;

const kinds: [string, () => Promise<QuotaStore>][] = [
  ['memory', async () => new MemoryQuotaStore()],
  ['redis', redisStore],
];

describe.each(kinds)('%s quota store', (_kind, make) => {
  it('admits a full bucket of requests, then refuses with the time until one is back', async () => {
    const store = await make();
    const tenant = freshTenant();
    // 3 per minute: one comes back every 20 s, far longer than this test runs.
    const limits = { requestsPerMinute: 3, tokensPerMinute: 0 };
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await store.admit(tenant, limits));
    expect(answers.map((a) => a.allowed)).toEqual([true, true, true, false]);
    expect(answers.map((a) => a.requests?.remaining)).toEqual([2, 1, 0, 0]);
    const refused = answers[3];
    expect(refused?.refusedBy).toBe('requests');
    expect(refused?.tokens).toBeUndefined();
    expect(refused?.retryAfterMs).toBeGreaterThan(15_000);
    expect(refused?.retryAfterMs).toBeLessThanOrEqual(20_000);
  });

  it('charges actual tokens; a bucket in debt refuses the next request without taking it', async () => {
    const store = await make();
    const tenant = freshTenant();
    const limits = { requestsPerMinute: 100, tokensPerMinute: 1000 };
    expect((await store.admit(tenant, limits)).tokens?.remaining).toBe(1000);
    const after = await store.charge(tenant, 1250, limits.tokensPerMinute);
    expect(after?.remaining).toBeLessThan(-240); // -250 plus what refilled meanwhile (1000/min)
    const refused = await store.admit(tenant, limits);
    expect(refused).toMatchObject({ allowed: false, refusedBy: 'tokens' });
    expect(refused.retryAfterMs).toBeGreaterThan(14_000); // ~15 s to repay 250 at 1000/min
    // The refused request did not use a request slot.
    expect(refused.requests?.remaining).toBe(99);
  });

  it('treats 0 as unlimited', async () => {
    const store = await make();
    const tenant = freshTenant();
    for (let i = 0; i < 5; i++) {
      const a = await store.admit(tenant, { requestsPerMinute: 0, tokensPerMinute: 0 });
      expect(a).toEqual({ allowed: true, retryAfterMs: 0, requests: undefined, tokens: undefined });
    }
    expect(await store.charge(tenant, 10, 0)).toBeUndefined();
  });

  it('refills continuously', async () => {
    const store = await make();
    const tenant = freshTenant();
    const limits = { requestsPerMinute: 600, tokensPerMinute: 0 }; // one back every 100 ms
    let refusedAfter = 0;
    while ((await store.admit(tenant, limits)).allowed) refusedAfter++;
    expect(refusedAfter).toBeGreaterThanOrEqual(600);
    await new Promise((r) => setTimeout(r, 250));
    expect((await store.admit(tenant, limits)).allowed).toBe(true);
  });
});

describe('memory store arithmetic', () => {
  it('refills at limit per minute, never above the limit', async () => {
    let now = 1_000_000;
    const store = new MemoryQuotaStore(() => now);
    const limits = { requestsPerMinute: 60, tokensPerMinute: 600 };
    for (let i = 0; i < 60; i++) expect((await store.admit('a', limits)).allowed).toBe(true);
    expect(await store.admit('a', limits)).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    now += 1000;
    expect(await store.admit('a', limits)).toMatchObject({ allowed: true, requests: { remaining: 0 } });
    now += 3_600_000;
    expect((await store.admit('a', limits)).requests).toEqual({ limit: 60, remaining: 59, resetMs: 1000 });
    expect(await store.charge('a', 300, 600)).toEqual({ limit: 600, remaining: 300, resetMs: 30_000 });
  });
});

describe('redis store shared by two replicas', () => {
  it('holds one limit across both', async () => {
    const [a, b] = [await redisStore(), await redisStore()];
    const tenant = freshTenant();
    const limits = { requestsPerMinute: 5, tokensPerMinute: 0 };
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? a : b).admit(tenant, limits)),
    );
    expect(answers.filter((x) => x.allowed)).toHaveLength(5);
  });
});
