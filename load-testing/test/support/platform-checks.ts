// Checks the fault tests run after every fault: KV blocks all back in the free pool, every
// process still answering, nothing crashed.
import { expect } from 'vitest';
import type { Harness } from '../../src/harness.js';
import { settledLoads } from '../../src/platform-health.js';

/** Waits until every running backend is idle with its whole KV pool free (a leak never gets there). */
export async function expectNoLeakedBlocks(harness: Harness): Promise<void> {
  for (const { backend, load } of await settledLoads(harness)) {
    expect({ backend, ...load }).toMatchObject({
      running: 0,
      waiting: 0,
      kv_blocks_free: load?.kv_blocks_total,
    });
    expect(load?.kv_blocks_total).toBeGreaterThan(0);
  }
}

/** Every process the harness started is alive and answers /health/live; no unexpected exits. */
export async function expectAllAlive(harness: Harness): Promise<void> {
  expect(harness.crashes()).toEqual([]);
  const services = [...harness.backends, ...harness.sidecars, harness.router, harness.edge].filter(
    (s) => s.running,
  );
  const statuses = await Promise.all(
    services.map(async (s) => [s.label, (await fetch(`${s.url}/health/live`)).status] as const),
  );
  expect(Object.fromEntries(statuses)).toEqual(Object.fromEntries(services.map((s) => [s.label, 200])));
}

/** Prometheus text -> the sum of every sample of `name` whose labels include `labels`. */
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

export async function metricsOf(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text();
}
