// Redis stopped under traffic and brought back: routing continues without session affinity,
// quotas fail open (the edge's default), every request ends, and affinity returns with Redis.
import { describe, expect, it } from 'vitest';
import { waitUntil } from '../src/ports.js';
import { send } from './support/client.js';
import { useHarness } from './support/harness.js';
import { harnessModel } from './support/models.js';
import { expectAllAlive, expectNoLeakedBlocks, metricSum, metricsOf } from './support/platform-checks.js';

const model = harnessModel();

const harness = useHarness();

const affinity = async (result: string) =>
  metricSum(await metricsOf(harness().router.url), 'strata_router_affinity_total', { result });

function burst(n: number, tag: string) {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      send(harness().entryUrl, harness().apiKey, {
        session: `redis-${tag}-${i % 5}`,
        stream: i % 2 === 0,
        endpoint: i % 3 === 0 ? 'completions' : 'generate',
      }),
    ),
  );
}

describe.skipIf(!model.path)(`Redis stopped and brought back${model.skipped}`, () => {
  it('keeps routing (and quotas open) while Redis is down', async () => {
    // Twice, so the second round finds the sessions the first one stored.
    await burst(10, 'before');
    const before = await burst(10, 'before');
    expect(before.map((o) => [o.status, o.terminal])).toEqual(before.map(() => [200, 'done']));
    expect(await affinity('hit')).toBeGreaterThan(0);

    await harness().redis.stop();
    const unavailableBefore = await affinity('unavailable');
    const during = await burst(30, 'during');
    expect(during.map((o) => [o.status, o.terminal])).toEqual(during.map(() => [200, 'done']));
    // The router really ran without its store: its lookups failed and it said so.
    expect(await affinity('unavailable')).toBeGreaterThan(unavailableBefore);
    if (harness().entry === 'edge') {
      const edge = await metricsOf(harness().edge.url);
      expect(metricSum(edge, 'strata_edge_quota_store_up')).toBe(0);
    }
    await expectAllAlive(harness());
  }, 120_000);

  it('uses Redis again once it is back', async () => {
    await harness().redis.start();
    // Sessions are remembered again: a repeated session id becomes a hit (the store reconnects
    // on its own; give it time).
    await waitUntil(
      'session affinity hits again',
      async () => {
        const hits = await affinity('hit');
        await burst(4, 'after');
        const outcomes = await burst(4, 'after');
        expect(outcomes.map((o) => [o.status, o.terminal])).toEqual(outcomes.map(() => [200, 'done']));
        return (await affinity('hit')) > hits;
      },
      60_000,
      500,
    );
    if (harness().entry === 'edge') {
      await waitUntil(
        'the edge to use its quota store again',
        async () => {
          await burst(1, 'edge');
          return metricSum(await metricsOf(harness().edge.url), 'strata_edge_quota_store_up') === 1;
        },
        60_000,
        500,
      );
    }
    await expectNoLeakedBlocks(harness());
    await expectAllAlive(harness());
  }, 120_000);
});
