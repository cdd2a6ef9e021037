import { randomUUID } from 'node:crypto';
import { createLogger, Registry } from '@strata/common';
import {
  canSpawnRedis,
  redisServerSkip,
  SpawnedRedis,
  sleep,
  type TestRedis,
  testRedis,
} from '@strata/common/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MemorySessionStore } from '../../src/affinity/memory-store.js';
import { RedisSessionStore } from '../../src/affinity/redis-store.js';
import { AffinityService } from '../../src/affinity/service.js';
import type { SessionStore } from '../../src/affinity/store.js';
import { captureLogger } from '../support/log.js';

const silent = createLogger({ service: 'router-service', level: 'silent' });
const id = (name: string): string => `${name}-${randomUUID()}`;

async function count(registry: Registry, name: string, labels: Record<string, string>): Promise<number> {
  const metric = await registry.getSingleMetric(name)?.get();
  const found = metric?.values.find((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val));
  return found?.value ?? 0;
}

describe('AffinityService (memory store)', () => {
  it('hit when the backend is live, miss when unknown, stale (and forgotten) when it left', async () => {
    const registry = new Registry();
    const affinity = new AffinityService({ store: new MemorySessionStore(), registry, logger: silent });
    expect(await affinity.lookup('s1', ['b1', 'b2'])).toEqual({ result: 'miss' });
    expect(await affinity.remember('s1', 'b2')).toBe('ok');
    expect(await affinity.lookup('s1', ['b1', 'b2'])).toEqual({ result: 'hit', backend: 'b2' });
    expect(await affinity.lookup('s1', new Set(['b2']))).toEqual({ result: 'hit', backend: 'b2' });
    expect(await affinity.lookup('s1', ['b1'])).toEqual({ result: 'stale', backend: 'b2' });
    // Forgotten: b2 coming back does not resurrect the old mapping.
    expect(await affinity.lookup('s1', ['b1', 'b2'])).toEqual({ result: 'miss' });
    expect(await affinity.remember('s1', 'b1')).toBe('ok');
    expect(await affinity.lookup('s1', ['b1', 'b2'])).toEqual({ result: 'hit', backend: 'b1' });
    expect(await count(registry, 'strata_router_affinity_total', { result: 'hit' })).toBe(3);
    expect(await count(registry, 'strata_router_affinity_total', { result: 'miss' })).toBe(2);
    expect(await count(registry, 'strata_router_affinity_total', { result: 'stale' })).toBe(1);
    expect(await count(registry, 'strata_router_affinity_total', { result: 'unavailable' })).toBe(0);
  });

  it('ignores empty and over-long session ids', async () => {
    const store = new MemorySessionStore();
    const affinity = new AffinityService({
      store,
      registry: new Registry(),
      logger: silent,
      maxSessionLength: 8,
    });
    expect(await affinity.remember('', 'b1')).toBe('ok');
    expect(await affinity.remember('123456789', 'b1')).toBe('ok');
    expect(store.size).toBe(0);
    expect(await affinity.lookup('123456789', ['b1'])).toEqual({ result: 'miss' });
  });

  it('a store that hangs or throws resolves to unavailable within the deadline, logged once per interval', async () => {
    const registry = new Registry();
    const { logger, lines } = captureLogger();
    let mode: 'hang' | 'throw' | 'ok' = 'hang';
    const inner = new MemorySessionStore();
    const store: SessionStore = {
      get: (s) => inner.get(s),
      getAndTouch: (s, ttl) =>
        mode === 'hang'
          ? new Promise(() => {})
          : mode === 'throw'
            ? Promise.reject(new Error('boom'))
            : inner.getAndTouch(s, ttl),
      set: (s, b, ttl) => (mode === 'ok' ? inner.set(s, b, ttl) : Promise.reject(new Error('boom'))),
      deleteIf: (s, b) => inner.deleteIf(s, b),
      delete: (s) => inner.delete(s),
      close: () => inner.close(),
    };
    const affinity = new AffinityService({
      store,
      registry,
      logger,
      deadlineMs: 50,
      errorLogIntervalMs: 60_000,
    });
    const started = performance.now();
    expect(await affinity.lookup('s', ['b1'])).toEqual({ result: 'unavailable' });
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(45);
    expect(elapsed).toBeLessThan(200);
    mode = 'throw';
    expect(await affinity.lookup('s', ['b1'])).toEqual({ result: 'unavailable' });
    expect(await affinity.remember('s', 'b1')).toBe('unavailable');
    expect(await count(registry, 'strata_router_affinity_store_errors_total', { op: 'lookup' })).toBe(2);
    expect(await count(registry, 'strata_router_affinity_store_errors_total', { op: 'remember' })).toBe(1);
    expect(await count(registry, 'strata_router_affinity_total', { result: 'unavailable' })).toBe(2);
    const warns = lines.filter((l) => l.level === 'warn');
    expect(warns).toHaveLength(1);
    expect(warns[0]?.msg).toBe('session affinity store unavailable; routing without affinity');
    mode = 'ok';
    expect(await affinity.remember('s', 'b1')).toBe('ok');
    expect(await affinity.lookup('s', ['b1'])).toEqual({ result: 'hit', backend: 'b1' });
    const recovered = lines.filter((l) => l.msg === 'session affinity store recovered; affinity is back');
    expect(recovered).toHaveLength(1);
    expect(recovered[0]?.suppressed_errors).toBe(2);
  });

  it('two services on one registry share the counters', async () => {
    const registry = new Registry();
    const store = new MemorySessionStore();
    const a = new AffinityService({ store, registry, logger: silent });
    const b = new AffinityService({ store, registry, logger: silent });
    await a.lookup('x', []);
    await b.lookup('x', []);
    expect(await count(registry, 'strata_router_affinity_total', { result: 'miss' })).toBe(2);
  });
});

describe('AffinityService (real Redis, two router replicas)', () => {
  let redis: TestRedis;
  const stores: RedisSessionStore[] = [];

  beforeAll(async () => {
    redis = await testRedis();
  });
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    await redis?.close();
  });

  async function replica(url: string): Promise<{ affinity: AffinityService; registry: Registry }> {
    const store = new RedisSessionStore({ url });
    stores.push(store);
    await store.waitReady();
    const registry = new Registry();
    return { affinity: new AffinityService({ store, registry, logger: silent, ttlMs: 60_000 }), registry };
  }

  it('a session remembered by one replica is found by the other; reassignment is seen by both', async () => {
    const r1 = await replica(redis.url);
    const r2 = await replica(redis.url);
    const s = id('shared');
    const live = ['b1', 'b2', 'b3'];
    expect(await r1.affinity.lookup(s, live)).toEqual({ result: 'miss' });
    expect(await r1.affinity.remember(s, 'b2')).toBe('ok');
    expect(await r2.affinity.lookup(s, live)).toEqual({ result: 'hit', backend: 'b2' });
    expect(await r1.affinity.lookup(s, live)).toEqual({ result: 'hit', backend: 'b2' });
    // b2 leaves: replica 2 sees it stale and reassigns; replica 1 follows.
    expect(await r2.affinity.lookup(s, ['b1', 'b3'])).toEqual({ result: 'stale', backend: 'b2' });
    expect(await r2.affinity.remember(s, 'b3')).toBe('ok');
    expect(await r1.affinity.lookup(s, ['b1', 'b3'])).toEqual({ result: 'hit', backend: 'b3' });
    // A late stale report for b2 from replica 1 must not wipe replica 2's reassignment.
    expect(await r1.affinity.lookup(s, ['b1'])).toEqual({ result: 'stale', backend: 'b3' });
    expect(await count(r1.registry, 'strata_router_affinity_total', { result: 'hit' })).toBe(2);
    expect(await count(r2.registry, 'strata_router_affinity_total', { result: 'hit' })).toBe(1);
  });

  it('the TTL is refreshed on use through the service', async () => {
    const store = new RedisSessionStore({ url: redis.url });
    stores.push(store);
    await store.waitReady();
    const affinity = new AffinityService({ store, registry: new Registry(), logger: silent, ttlMs: 300 });
    const s = id('refresh');
    await affinity.remember(s, 'b1');
    for (let i = 0; i < 4; i++) {
      await sleep(150);
      expect(await affinity.lookup(s, ['b1'])).toEqual({ result: 'hit', backend: 'b1' });
    }
    await sleep(400);
    expect(await affinity.lookup(s, ['b1'])).toEqual({ result: 'miss' });
  });

  describe.skipIf(!canSpawnRedis())(`Redis stopped mid-test (own redis-server)${redisServerSkip()}`, () => {
    let own: SpawnedRedis;
    beforeAll(async () => {
      own = await SpawnedRedis.start();
    });
    afterAll(async () => {
      await own?.stop();
    });

    it('lookups turn unavailable quickly, routing goes on, and affinity recovers when Redis is back', async () => {
      const r1 = await replica(own.url);
      const r2 = await replica(own.url);
      const { logger, lines } = captureLogger();
      const registry = new Registry();
      const store = stores[stores.length - 1];
      if (!store) throw new Error('no store');
      const logged = new AffinityService({
        store,
        registry,
        logger,
        ttlMs: 60_000,
        errorLogIntervalMs: 60_000,
      });
      const s = id('outage');
      await r1.affinity.remember(s, 'b1');
      expect(await r2.affinity.lookup(s, ['b1', 'b2'])).toEqual({ result: 'hit', backend: 'b1' });

      await own.stop();
      // Routing code keeps working: each call resolves (never rejects) to 'unavailable', fast.
      for (let i = 0; i < 10; i++) {
        const started = performance.now();
        expect(await logged.lookup(s, ['b1', 'b2'])).toEqual({ result: 'unavailable' });
        expect(await r1.affinity.remember(s, 'b2')).toBe('unavailable');
        expect(performance.now() - started).toBeLessThan(500);
      }
      expect(await count(registry, 'strata_router_affinity_total', { result: 'unavailable' })).toBe(10);
      expect(await count(registry, 'strata_router_affinity_store_errors_total', { op: 'lookup' })).toBe(10);
      expect(lines.filter((l) => l.level === 'warn')).toHaveLength(1);

      await own.restart();
      // Reconnects by itself (retry delay capped at 1 s): bounded wait for the first answer.
      let outcome = await logged.lookup(s, ['b1', 'b2']);
      for (let i = 0; i < 60 && outcome.result === 'unavailable'; i++) {
        await sleep(50);
        outcome = await logged.lookup(s, ['b1', 'b2']);
      }
      // The restarted server has no persistence: the session starts over.
      expect(outcome).toEqual({ result: 'miss' });
      expect(
        lines.filter((l) => l.msg === 'session affinity store recovered; affinity is back'),
      ).toHaveLength(1);
      for (let i = 0; i < 60 && (await r1.affinity.remember(s, 'b2')) === 'unavailable'; i++) await sleep(50);
      let seen = await r2.affinity.lookup(s, ['b1', 'b2']);
      for (let i = 0; i < 60 && seen.result === 'unavailable'; i++) {
        await sleep(50);
        seen = await r2.affinity.lookup(s, ['b1', 'b2']);
      }
      expect(seen).toEqual({ result: 'hit', backend: 'b2' });
    });
  });
});
