import { randomUUID } from 'node:crypto';
import { sleep, type TestRedis, testRedis } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisSessionStore, SESSION_KEY_PREFIX } from '../../src/affinity/redis-store.js';

describe('RedisSessionStore (real Redis)', () => {
  let redis: TestRedis;
  let store: RedisSessionStore;
  const id = (name: string): string => `${name}-${randomUUID()}`;

  beforeAll(async () => {
    redis = await testRedis();
    store = new RedisSessionStore({ url: redis.url });
    await store.waitReady();
  });

  afterAll(async () => {
    await store?.close();
    await redis?.close();
  });

  it('stores under strata:session:<id> with a PX TTL', async () => {
    const s = id('ns');
    await store.set(s, 'backend-a', 60_000);
    expect(await store.client.get(`${SESSION_KEY_PREFIX}${s}`)).toBe('backend-a');
    const pttl = await store.client.pttl(`${SESSION_KEY_PREFIX}${s}`);
    expect(pttl).toBeGreaterThan(59_000);
    expect(pttl).toBeLessThanOrEqual(60_000);
    expect(await store.get(s)).toBe('backend-a');
  });

  it('expires a session after its TTL', async () => {
    const s = id('ttl');
    await store.set(s, 'backend-a', 150);
    expect(await store.get(s)).toBe('backend-a');
    await sleep(300);
    expect(await store.get(s)).toBeUndefined();
  });

  it('getAndTouch refreshes the TTL atomically (Lua), get does not', async () => {
    const s = id('touch');
    const k = `${SESSION_KEY_PREFIX}${s}`;
    await store.set(s, 'backend-a', 1_000);
    expect(await store.get(s)).toBe('backend-a');
    expect(await store.client.pttl(k)).toBeLessThanOrEqual(1_000);
    expect(await store.getAndTouch(s, 60_000)).toBe('backend-a');
    expect(await store.client.pttl(k)).toBeGreaterThan(59_000);
    expect(await store.getAndTouch(id('missing'), 60_000)).toBeUndefined();
    // Refresh on use keeps a session alive past its original TTL.
    const short = id('alive');
    await store.set(short, 'backend-b', 300);
    for (let i = 0; i < 4; i++) {
      await sleep(150);
      expect(await store.getAndTouch(short, 300)).toBe('backend-b');
    }
  });

  it('deleteIf removes only a matching mapping', async () => {
    const s = id('cad');
    await store.set(s, 'backend-b', 60_000);
    await store.deleteIf(s, 'backend-a');
    expect(await store.get(s)).toBe('backend-b');
    await store.deleteIf(s, 'backend-b');
    expect(await store.get(s)).toBeUndefined();
    await store.set(s, 'backend-c', 60_000);
    await store.delete(s);
    expect(await store.get(s)).toBeUndefined();
  });

  it('rejects a TTL below 1 ms', async () => {
    await expect(store.set(id('bad'), 'b', 0)).rejects.toThrow(RangeError);
  });
});
