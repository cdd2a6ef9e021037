#!/usr/bin/env node
// Benchmark: what the edge hop adds (scripts/bench/hop-lib.mjs measures it). The edge runs here
// as the service builds it: a tenants file (one API key, checked on every request), in-memory
// quotas high enough never to refuse, full schema validation, the usage tap, and its request
// log serialized to a discarded stream.
//   node bench/hop.mjs [--rounds 3] [--seconds 5] [--warmup 2] [--rate 1000] [--concurrency 64]
// Build first (pnpm exec tsc -p tsconfig.build.json). Writes docs/benchmarks/edge-hop.json.
// Measured side by side with a bare node:http proxy in every round. Targets: p99 <= 1.5x and
// requests/s >= 0.7x the bare proxy's.
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hopArgs, measureHop, startHopService } from '../../../scripts/bench/hop-lib.mjs';

const common = await import('@strata/common');
const KEY = 'sk-bench';

async function startEdge(upstreamUrl) {
  const tenants = join(mkdtempSync(join(tmpdir(), 'strata-edge-hop-')), 'tenants.yaml');
  const hash = createHash('sha256').update(KEY).digest('hex');
  writeFileSync(
    tenants,
    `tenants:\n  - {name: bench, keys: ["sha256:${hash}"], requests_per_minute: 100000000}\n`,
  );
  return startHopService({
    benchUrl: import.meta.url,
    common,
    service: 'edge-gateway',
    env: { STRATA_ROUTER_URL: upstreamUrl, STRATA_EDGE_TENANTS_FILE: tenants },
    wire: ({ buildEdgeParts }, config, logger, metrics) => buildEdgeParts(config, logger, metrics.registry),
  });
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
