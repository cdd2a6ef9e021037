// The k6 suites CI runs: smoke and a short steady run against the full local platform (edge,
// router with Redis, two CPU backends, sidecars), scraped by a real Prometheus. k6 exits 0 only
// when every threshold of the suite held.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type K6RunOptions, runK6 } from '../src/k6.js';
import { processMemory } from '../src/platform-health.js';
import { waitUntil } from '../src/ports.js';
import { useHarness } from './support/harness.js';
import { harnessModel } from './support/models.js';
import { expectAllAlive, expectNoLeakedBlocks } from './support/platform-checks.js';

const model = harnessModel();

const harness = useHarness({ prometheus: true });
// Made in beforeAll, so a run that skips every test (no model) leaves no temp dir behind.
let out: string;

beforeAll(() => {
  out = mkdtempSync(join(tmpdir(), 'strata-k6-test-'));
});

afterAll(() => {
  rmSync(out, { recursive: true, force: true });
});

/** Runs a k6 suite against the harness's entry, its summary written to out/<scenario>.json. */
const runScenario = (scenario: K6RunOptions['scenario'], env?: Record<string, string>) =>
  runK6({
    scenario,
    target: harness().entryUrl,
    apiKey: harness().apiKey,
    summaryJson: join(out, `${scenario}.json`),
    env,
  });

async function promQuery(
  query: string,
): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
  const url = `${harness().prometheus?.url}/api/v1/query?query=${encodeURIComponent(query)}`;
  const body = (await (await fetch(url)).json()) as {
    data: { result: { metric: Record<string, string>; value: [number, string] }[] };
  };
  return body.data.result;
}

describe.skipIf(!model.path)(`k6 against the local platform${model.skipped}`, () => {
  it('goes through the edge', () => {
    expect(harness().entry).toBe('edge');
  });

  it('has Prometheus scraping every service', async () => {
    await waitUntil(
      'every target scraped',
      async () => (await promQuery('up == 1')).length === 6,
      60_000,
      500,
    );
    const jobs = (await promQuery('up')).map((r) => `${r.metric.job}/${r.metric.instance_name}`).sort();
    expect(jobs).toEqual([
      'edge-gateway/edge',
      'inference-backend/backend-1',
      'inference-backend/backend-2',
      'observability/sidecar-1',
      'observability/sidecar-2',
      'router-service/router',
    ]);
  });

  it('smoke: every endpoint, streaming and not, succeeds', async () => {
    const { code, summary } = await runScenario('smoke');
    expect(code).toBe(0);
    expect(summary).toMatchObject({ requests: 18, error_rate: 0, incomplete: 0, rate_limited_rate: 0 });
  }, 120_000);

  it('steady: a constant arrival rate holds its thresholds', async () => {
    const { code, summary } = await runScenario('steady', { STRATA_RATE: '8', STRATA_DURATION: '20s' });
    expect(code).toBe(0);
    expect(summary).toMatchObject({ error_rate: 0, incomplete: 0 });
    expect(summary?.requests).toBeGreaterThanOrEqual(150);
    // Prometheus saw the traffic at the edge.
    await waitUntil(
      'Prometheus to scrape the edge after the run',
      async () => {
        const rows = await promQuery('sum(strata_edge_requests_total{outcome="forwarded"})');
        return Number(rows[0]?.value[1] ?? 0) >= 150;
      },
      30_000,
      500,
    );
    await expectNoLeakedBlocks(harness());
    await expectAllAlive(harness());
    // The soak's leak report reads every service's resident memory.
    const memory = processMemory(harness());
    expect(Object.keys(memory).sort()).toEqual([
      'backend-1',
      'backend-2',
      'edge',
      'router',
      'sidecar-1',
      'sidecar-2',
    ]);
    for (const [label, mib] of Object.entries(memory)) expect(mib, label).toBeGreaterThan(10);
  }, 180_000);
});
