// `strata-platform load <scenario>`: starts the harness (Redis, two CPU backends, router, edge,
// sidecars, Prometheus), runs one k6 suite against it, and saves the summary JSON and the plot
// into docs/benchmarks/ as k6-<scenario>.json / k6-<scenario>.png.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startHarness } from './harness.js';
import { runK6, SCENARIOS, type Scenario } from './k6.js';
import {
  isIdle,
  type MemorySample,
  processMemory,
  secondHalfGrowth,
  settledLoads,
} from './platform-health.js';
import { plotRun } from './plot.js';

export interface LoadCommandOptions {
  scenario: string;
  prometheus: boolean;
  /** Default: the repository's docs/benchmarks. */
  outDir?: string;
  plot: boolean;
}

export async function loadCommand(options: LoadCommandOptions): Promise<number> {
  if (!SCENARIOS.includes(options.scenario as Scenario)) {
    process.stderr.write(`unknown scenario "${options.scenario}": one of ${SCENARIOS.join(', ')}\n`);
    return 2;
  }
  const scenario = options.scenario as Scenario;
  const sampleSeconds = Number(process.env.STRATA_MEMORY_SAMPLE_S ?? 30);
  if (!Number.isFinite(sampleSeconds) || sampleSeconds < 1) {
    process.stderr.write(
      `STRATA_MEMORY_SAMPLE_S must be a number of seconds >= 1, got "${process.env.STRATA_MEMORY_SAMPLE_S}"\n`,
    );
    return 2;
  }
  const outDir = resolve(
    options.outDir ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'benchmarks'),
  );
  mkdirSync(outDir, { recursive: true });
  process.stdout.write('starting the platform: redis, 2 CPU backends, router, edge, 2 sidecars');
  process.stdout.write(options.prometheus ? ', prometheus\n' : '\n');
  const harness = await startHarness({ prometheus: options.prometheus });
  const stop = () => void harness.stop().then(() => process.exit(130));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    process.stdout.write(`k6 ${scenario} against the ${harness.entry} at ${harness.entryUrl}\n`);
    if (harness.prometheus) process.stdout.write(`prometheus at ${harness.prometheus.url}\n`);
    const summaryJson = join(outDir, `k6-${scenario}.json`);
    const csv = join(harness.dir, 'samples.csv');
    const memoryBefore = processMemory(harness);
    // Every service's memory through the run, so growth can be told from warm-up.
    const started = Date.now();
    const series: MemorySample[] = [{ t_s: 0, rss_mib: memoryBefore }];
    const sampler = setInterval(
      () => series.push({ t_s: Math.round((Date.now() - started) / 1000), rss_mib: processMemory(harness) }),
      sampleSeconds * 1000,
    );
    const { code } = await runK6({
      scenario,
      target: harness.entryUrl,
      apiKey: harness.apiKey,
      summaryJson,
      csv,
      env: {
        STRATA_RUN_LABEL: `local harness: 2 CPU backends (${harness.modelName}, 1 thread each) behind the ${harness.entry}`,
      },
      onLine: (line) => process.stdout.write(`${line}\n`),
    }).finally(() => clearInterval(sampler));
    // What the run left behind: every backend back to idle with its whole KV pool, and each
    // process's resident memory next to what it was before the traffic (a leak grows it).
    const loads = await settledLoads(harness);
    const memoryAfter = processMemory(harness);
    series.push({ t_s: Math.round((Date.now() - started) / 1000), rss_mib: memoryAfter });
    const growth = secondHalfGrowth(series);
    const leaked = loads.filter((l) => !isIdle(l.load));
    const platform = {
      backends_after: loads,
      rss_mib: Object.fromEntries(
        Object.keys(memoryAfter).map((label) => [
          label,
          { before: memoryBefore[label], after: memoryAfter[label], second_half_growth: growth[label] },
        ]),
      ),
      rss_series: series,
    };
    for (const { backend, load } of loads) {
      process.stdout.write(
        `${backend} after the run: running ${load?.running} waiting ${load?.waiting} ` +
          `kv blocks free ${load?.kv_blocks_free}/${load?.kv_blocks_total}${isIdle(load) ? '' : '  <- NOT IDLE'}\n`,
      );
    }
    for (const [label, { before, after, second_half_growth }] of Object.entries(platform.rss_mib)) {
      const late =
        second_half_growth === undefined ? '' : `, ${second_half_growth} MiB of it in the run's second half`;
      process.stdout.write(`${label} resident memory: ${before} MiB before, ${after} MiB after${late}\n`);
    }
    if (existsSync(summaryJson)) {
      const summary = JSON.parse(readFileSync(summaryJson, 'utf8')) as Record<string, unknown>;
      writeFileSync(summaryJson, `${JSON.stringify({ ...summary, platform }, null, 2)}\n`);
    }
    process.stdout.write(`summary: ${summaryJson}\n`);
    if (options.plot) {
      const png = join(outDir, `k6-${scenario}.png`);
      plotRun(csv, png, `strata ${scenario}: TTFT and throughput (${harness.modelName}, 2 CPU backends)`);
      process.stdout.write(`plot: ${png}\n`);
    }
    const crashes = harness.crashes();
    if (crashes.length > 0) process.stderr.write(`processes that crashed: ${crashes.join('; ')}\n`);
    if (leaked.length > 0)
      process.stderr.write(`backends not idle after the run: ${leaked.map((l) => l.backend).join(', ')}\n`);
    return crashes.length > 0 || leaked.length > 0 ? 1 : code;
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    await harness.stop();
  }
}
