import { createLogger, Registry } from '@strata/common';
import { sleep } from '@strata/common/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { BackendTracker, type BackendTrackerOptions } from '../../src/health/tracker.js';
import { DEFAULT_LOAD_MAX_AGE_MS, freshLoad } from '../../src/routing/backend-state.js';
import { FakeBackend } from '../support/fake-backend.js';
import { captureLogger } from '../support/log.js';

const silent = createLogger({ service: 'router-service', level: 'silent' });

async function metricValue(registry: Registry, name: string, backend: string): Promise<number | undefined> {
  const m = await registry.getSingleMetric(name)?.get();
  return m?.values.find((v) => v.labels.backend === backend)?.value;
}

/** Polls cond every 10 ms, at most timeoutMs; returns whether it became true. */
async function eventually(cond: () => boolean, timeoutMs = 2_000): Promise<boolean> {
  for (let waited = 0; waited < timeoutMs; waited += 10) {
    if (cond()) return true;
    await sleep(10);
  }
  return cond();
}

describe('BackendTracker', () => {
  const cleanup: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const fn of cleanup.splice(0).reverse()) await fn();
  });

  async function backend(): Promise<FakeBackend> {
    const b = await FakeBackend.start();
    cleanup.push(() => b.close());
    return b;
  }

  function tracker(options: Partial<BackendTrackerOptions> & Pick<BackendTrackerOptions, 'backends'>): {
    t: BackendTracker;
    registry: Registry;
  } {
    const registry = options.registry ?? new Registry();
    const t = new BackendTracker({ registry, logger: silent, ...options });
    cleanup.push(() => t.stop());
    return { t, registry };
  }

  it('reports a not-ready backend as not ready, and ready once /health/ready answers 200', async () => {
    const a = await backend();
    const b = await backend();
    b.readyStatus = 503;
    const { t, registry } = tracker({
      backends: [
        { name: 'a', url: a.url },
        { name: 'b', url: b.url },
      ],
    });
    expect(t.snapshot().map((s) => s.ready)).toEqual([false, false]); // unknown until probed
    await t.refresh();
    expect(t.get('a')).toMatchObject({ name: 'a', url: a.url, ready: true, healthy: true });
    expect(t.get('b')).toMatchObject({ name: 'b', url: b.url, ready: false, healthy: true });
    expect(await metricValue(registry, 'strata_router_backend_ready', 'a')).toBe(1);
    expect(await metricValue(registry, 'strata_router_backend_ready', 'b')).toBe(0);
    b.readyStatus = 200;
    await t.refresh();
    expect(t.get('b')?.ready).toBe(true);
    expect(await metricValue(registry, 'strata_router_backend_ready', 'b')).toBe(1);
    // A 503 is "not ready", not a failure: no ejection however often it is seen.
    b.readyStatus = 503;
    for (let i = 0; i < 5; i++) await t.refresh();
    expect(t.get('b')).toMatchObject({ ready: false, healthy: true });
    expect(await metricValue(registry, 'strata_router_backend_ejections_total', 'b')).toBeUndefined();
  });

  it('a /load report saying ready: false makes the backend not ready before the next probe', async () => {
    const a = await backend();
    const { t } = tracker({ backends: [{ name: 'a', url: a.url }] });
    await t.refresh();
    expect(t.get('a')?.ready).toBe(true);
    a.load.ready = false; // draining
    a.readyStatus = 503;
    const probes = a.hits.ready;
    await t.refresh();
    expect(t.get('a')?.ready).toBe(false);
    expect(a.hits.ready).toBe(probes + 1);
  });

  it('stores the load report with its receive time, refreshed by polling', async () => {
    const a = await backend();
    a.load = { ...a.load, running: 3, waiting: 7, kv_usage: 0.25, kv_blocks_free: 750 };
    const { t } = tracker({
      backends: [{ name: 'a', url: a.url }],
      loadIntervalMs: 20,
      probeIntervalMs: 1_000,
    });
    const before = Date.now();
    await t.refresh();
    const first = t.get('a')?.load;
    expect(first).toEqual({ waiting: 7, running: 3, kvUsage: 0.25, freeBlocks: 750, at: expect.any(Number) });
    if (!first) throw new Error('no load');
    expect(first.at).toBeGreaterThanOrEqual(before);
    expect(first.at).toBeLessThanOrEqual(Date.now());
    expect(freshLoad(first, Date.now(), DEFAULT_LOAD_MAX_AGE_MS)).toBe(first);
    expect(freshLoad(first, first.at + 251, DEFAULT_LOAD_MAX_AGE_MS)).toBeUndefined();

    t.start();
    a.load = { ...a.load, waiting: 1, kv_usage: 0.9, kv_blocks_free: 100 };
    expect(await eventually(() => t.get('a')?.load?.waiting === 1)).toBe(true);
    const second = t.get('a')?.load;
    expect(second).toMatchObject({ waiting: 1, running: 3, kvUsage: 0.9, freeBlocks: 100 });
    expect(second?.at ?? 0).toBeGreaterThan(first.at);
    const polls = a.hits.load;
    expect(await eventually(() => a.hits.load >= polls + 3)).toBe(true);
    await t.stop();
    // Stopped: no more polls, and the last load goes stale.
    const last = t.get('a')?.load;
    const pollsAtStop = a.hits.load;
    await sleep(100);
    expect(a.hits.load).toBe(pollsAtStop);
    expect(freshLoad(last, Date.now() + 300, DEFAULT_LOAD_MAX_AGE_MS)).toBeUndefined();
  });

  it('ignores an invalid load report (the last one goes stale) without counting a failure', async () => {
    const a = await backend();
    const { t, registry } = tracker({ backends: [{ name: 'a', url: a.url }], failureThreshold: 1 });
    await t.refresh();
    const load = t.get('a')?.load;
    a.loadMode = 'garbage';
    for (let i = 0; i < 3; i++) await t.refresh();
    expect(t.get('a')?.load).toEqual(load);
    expect(t.get('a')?.healthy).toBe(true);
    expect(await metricValue(registry, 'strata_router_backend_ejections_total', 'a')).toBeUndefined();
  });

  it('ejects after consecutive failures with a doubling backoff, half-open after it, closed on success', async () => {
    let now = 10_000;
    const { logger, lines } = captureLogger();
    const registry = new Registry();
    const t = new BackendTracker({
      backends: [{ name: 'a', url: 'http://127.0.0.1:9' }],
      registry,
      logger,
      now: () => now,
      failureThreshold: 3,
      ejectionBaseMs: 200,
      ejectionMaxMs: 500,
    });
    cleanup.push(() => t.stop());
    t.reportFailure('a');
    t.reportFailure('a');
    expect(t.get('a')?.healthy).toBe(true);
    t.reportSuccess('a'); // resets the consecutive count
    t.reportFailure('a');
    t.reportFailure('a');
    expect(t.get('a')?.healthy).toBe(true);
    t.reportFailure('a');
    expect(t.get('a')?.healthy).toBe(false);
    expect(await metricValue(registry, 'strata_router_backend_ejections_total', 'a')).toBe(1);
    t.reportFailure('a'); // while ejected: ignored
    now += 199;
    expect(t.get('a')?.healthy).toBe(false);
    now += 1;
    expect(t.get('a')?.healthy).toBe(true); // half-open
    t.reportFailure('a'); // one failure re-ejects, for twice as long
    expect(t.get('a')?.healthy).toBe(false);
    now += 399;
    expect(t.get('a')?.healthy).toBe(false);
    now += 1;
    expect(t.get('a')?.healthy).toBe(true);
    t.reportFailure('a'); // 800 ms capped at 500
    now += 499;
    expect(t.get('a')?.healthy).toBe(false);
    now += 1;
    expect(t.get('a')?.healthy).toBe(true);
    expect(await metricValue(registry, 'strata_router_backend_ejections_total', 'a')).toBe(3);
    t.reportSuccess('a'); // closed: the threshold and the base backoff apply again
    t.reportFailure('a');
    t.reportFailure('a');
    expect(t.get('a')?.healthy).toBe(true);
    t.reportFailure('a');
    expect(t.get('a')?.healthy).toBe(false);
    now += 200;
    expect(t.get('a')?.healthy).toBe(true);
    expect(lines.filter((l) => l.msg === 'backend ejected after failures').map((l) => l.backoff_ms)).toEqual([
      200, 400, 500, 200,
    ]);
    expect(lines.filter((l) => l.msg === 'backend recovered after ejection')).toHaveLength(1);
    t.reportFailure('unknown'); // unknown names are ignored
    expect(t.get('unknown')).toBeUndefined();
  });

  it('a backend whose server closes becomes unhealthy and not ready, and recovers when it is back', async () => {
    const a = await backend();
    const b = await backend();
    const { t, registry } = tracker({
      backends: [
        { name: 'a', url: a.url },
        { name: 'b', url: b.url },
      ],
      probeIntervalMs: 50,
      loadIntervalMs: 20,
      ejectionBaseMs: 200,
      ejectionMaxMs: 400,
    });
    t.start();
    expect(await eventually(() => t.snapshot().every((s) => s.ready && s.healthy))).toBe(true);
    await a.close();
    const closedAt = performance.now();
    expect(await eventually(() => t.get('a')?.healthy === false && t.get('a')?.ready === false)).toBe(true);
    expect(performance.now() - closedAt).toBeLessThan(1_000);
    expect(t.get('b')).toMatchObject({ ready: true, healthy: true });
    expect(await metricValue(registry, 'strata_router_backend_ejections_total', 'a')).toBeGreaterThanOrEqual(
      1,
    );
    expect(await metricValue(registry, 'strata_router_backend_ready', 'a')).toBe(0);
    await a.reopen();
    expect(await eventually(() => t.get('a')?.healthy === true && t.get('a')?.ready === true, 3_000)).toBe(
      true,
    );
    t.reportSuccess('a');
    expect(await metricValue(registry, 'strata_router_backend_ready', 'a')).toBe(1);
  });

  it('stays ready through a probe that times out, and is not ready after failureThreshold in a row', async () => {
    const a = await backend();
    const { t } = tracker({ backends: [{ name: 'a', url: a.url }], probeTimeoutMs: 50, failureThreshold: 3 });
    await t.refresh();
    expect(t.get('a')?.ready).toBe(true);
    a.readyMode = 'hang';
    await t.refresh();
    await t.refresh();
    expect(t.get('a')?.ready).toBe(true); // two slow probes are no verdict (the load polls still answer)
    await t.refresh();
    expect(t.get('a')?.ready).toBe(false);
    a.readyMode = 'ok';
    await t.refresh();
    expect(t.get('a')?.ready).toBe(true);
  });

  it('a load endpoint that hangs times out and counts as a failure; stop() does not wait for it', async () => {
    const a = await backend();
    a.loadMode = 'hang';
    const { t, registry } = tracker({
      backends: [{ name: 'a', url: a.url }],
      loadTimeoutMs: 50,
      failureThreshold: 2,
    });
    const started = performance.now();
    await t.refresh();
    await t.refresh();
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(t.get('a')).toMatchObject({ ready: true, healthy: false });
    expect(await metricValue(registry, 'strata_router_backend_ejections_total', 'a')).toBe(1);

    const { t: t2 } = tracker({ backends: [{ name: 'a', url: a.url }], loadTimeoutMs: 10_000 });
    t2.start();
    expect(await eventually(() => a.hits.load >= 3)).toBe(true);
    const stopping = performance.now();
    await t2.stop();
    expect(performance.now() - stopping).toBeLessThan(500);
  });

  it('stop() leaves no timers behind', async () => {
    const a = await backend();
    const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const { t } = tracker({ backends: [{ name: 'a', url: a.url }], probeIntervalMs: 20, loadIntervalMs: 10 });
    t.start();
    expect(await eventually(() => t.get('a')?.ready === true)).toBe(true);
    expect(timers()).toBeGreaterThan(before);
    await t.stop();
    await t.stop(); // idempotent
    expect(timers()).toBe(before);
    expect(() => t.start()).toThrow('BackendTracker was stopped');
  });

  it('setBackends adds and removes backends, dropping their ready series', async () => {
    const a = await backend();
    const b = await backend();
    const { t, registry } = tracker({ backends: [{ name: 'a', url: a.url }] });
    await t.refresh();
    t.setBackends([{ name: 'b', url: b.url }]);
    expect(t.snapshot().map((s) => s.name)).toEqual(['b']);
    expect(await metricValue(registry, 'strata_router_backend_ready', 'a')).toBeUndefined();
    expect(await metricValue(registry, 'strata_router_backend_ready', 'b')).toBe(0);
    await t.refresh();
    expect(t.get('b')?.ready).toBe(true);
    // Same name, same URL: state kept.
    t.setBackends([{ name: 'b', url: b.url }]);
    expect(t.get('b')?.ready).toBe(true);
  });
});
