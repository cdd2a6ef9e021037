#!/usr/bin/env node
// Benchmark: what the router hop adds (scripts/bench/hop-lib.mjs measures it). The router runs
// here as the service builds it: routing file, tracker, in-memory affinity, and the decision log
// serialized to a discarded stream.
//   node bench/hop.mjs [--rate 1000] [--seconds 5] [--concurrency 64]
// Build first (pnpm exec tsc -p tsconfig.build.json). Writes docs/benchmarks/router-hop.json.
// Targets: <= 1 ms p50 and <= 5 ms p99 added at 1,000 requests/s.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { hopArgs, measureHop } from '../../../scripts/bench/hop-lib.mjs';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');

const common = await import('@strata/common');
const { buildApp } = await import(join(pkg, 'dist/app.js'));
const { configSchema, configEnv } = await import(join(pkg, 'dist/config.js'));
const { buildRouterParts } = await import(join(pkg, 'dist/wiring.js'));

async function startRouter(upstreamUrl) {
  const routes = join(mkdtempSync(join(tmpdir(), 'strata-hop-')), 'routes.yaml');
  writeFileSync(
    routes,
    `pools:\n  p: { backends: [{ name: up, url: "${upstreamUrl}" }] }\ndefault: { pool: p }\n`,
  );
  const config = common.loadConfig({
    schema: configSchema,
    envMap: configEnv,
    env: { STRATA_ROUTES_FILE: routes },
  });
  const logger = common.createLogger({
    service: 'router-service',
    destination: new Writable({ write: (_c, _e, done) => done() }),
  });
  const metrics = common.createMetrics('router-service');
  const parts = await buildRouterParts(config, logger, metrics.registry);
  for (let i = 0; i < 50 && !parts.deps.tracker.snapshot().every((b) => b.ready); i++) {
    await parts.deps.tracker.refresh();
    await new Promise((r) => setTimeout(r, 20));
  }
  const app = buildApp({ config, logger, metrics, readiness: new common.Readiness() }, parts.deps);
  await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url: `http://127.0.0.1:${app.server.address().port}`,
    close: async () => {
      await app.close();
      await parts.close();
    },
  };
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
