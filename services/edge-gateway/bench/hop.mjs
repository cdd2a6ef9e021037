#!/usr/bin/env node
// Benchmark: what the edge hop adds (scripts/bench/hop-lib.mjs measures it). The edge runs here
// as the service builds it: a tenants file (one API key, checked on every request), in-memory
// quotas high enough never to refuse, full schema validation, the usage tap, and its request
// log serialized to a discarded stream.
//   node bench/hop.mjs [--rate 1000] [--seconds 5] [--concurrency 64]
// Build first (pnpm exec tsc -p tsconfig.build.json). Writes docs/benchmarks/edge-hop.json.
// Target: <= 1 ms p50 added at 1,000 requests/s.
import { createHash } from 'node:crypto';
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
const { buildEdgeParts } = await import(join(pkg, 'dist/wiring.js'));
const KEY = 'sk-bench';

async function startEdge(upstreamUrl) {
  const tenants = join(mkdtempSync(join(tmpdir(), 'strata-edge-hop-')), 'tenants.yaml');
  const hash = createHash('sha256').update(KEY).digest('hex');
  writeFileSync(
    tenants,
    `tenants:\n  - {name: bench, keys: ["sha256:${hash}"], requests_per_minute: 100000000}\n`,
  );
  const config = common.loadConfig({
    schema: configSchema,
    envMap: configEnv,
    env: { STRATA_ROUTER_URL: upstreamUrl, STRATA_EDGE_TENANTS_FILE: tenants },
  });
  const logger = common.createLogger({
    service: 'edge-gateway',
    destination: new Writable({ write: (_c, _e, done) => done() }),
  });
  const metrics = common.createMetrics('edge-gateway');
  const wiring = await buildEdgeParts(config, logger, metrics.registry);
  const app = buildApp({ config, logger, metrics, readiness: new common.Readiness() }, wiring.parts);
  await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url: `http://127.0.0.1:${app.server.address().port}`,
    close: async () => {
      await app.close();
      await wiring.close();
    },
  };
}

await measureHop({
  hop: 'edge',
  start: startEdge,
  headers: { authorization: `Bearer ${KEY}` },
  ...hopArgs(),
  undici: import.meta.resolve('undici'),
  out: 'edge-hop.json',
  command: 'node services/edge-gateway/bench/hop.mjs',
});
process.exit(0);
