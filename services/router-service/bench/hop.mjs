#!/usr/bin/env node
// Benchmark: what the router hop adds (scripts/bench/hop-lib.mjs measures it). The router runs
// here as the service builds it: routing file, tracker, in-memory affinity, and the decision log
// serialized to a discarded stream.
//   node bench/hop.mjs [--rounds 3] [--seconds 5] [--warmup 2] [--rate 1000] [--concurrency 64]
// Build first (pnpm exec tsc -p tsconfig.build.json). Writes docs/benchmarks/router-hop.json.
// Measured side by side with a bare node:http proxy in every round. Targets: p99 <= 1.5x and
// requests/s >= 0.7x the bare proxy's.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hopArgs, measureHop, startHopService } from '../../../scripts/bench/hop-lib.mjs';

const common = await import('@strata/common');

async function startRouter(upstreamUrl) {
  const routes = join(mkdtempSync(join(tmpdir(), 'strata-hop-')), 'routes.yaml');
  writeFileSync(
    routes,
    `pools:\n  p: { backends: [{ name: up, url: "${upstreamUrl}" }] }\ndefault: { pool: p }\n`,
  );
  return startHopService({
    benchUrl: import.meta.url,
    common,
    service: 'router-service',
    env: { STRATA_ROUTES_FILE: routes },
    wire: async ({ buildRouterParts }, config, logger, metrics) => {
      const parts = await buildRouterParts(config, logger, metrics.registry);
      for (let i = 0; i < 50 && !parts.deps.tracker.snapshot().every((b) => b.ready); i++) {
        await parts.deps.tracker.refresh();
        await new Promise((r) => setTimeout(r, 20));
      }
      return { parts: parts.deps, close: () => parts.close() };
    },
  });
}

await measureHop({
  hop: 'router',
  start: startRouter,
  ...hopArgs(),
  undici: import.meta.resolve('undici'),
  out: 'router-hop.json',
  command: 'node services/router-service/bench/hop.mjs',
});
process.exit(0);
