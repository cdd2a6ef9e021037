#!/usr/bin/env node
// Benchmark: what the router hop adds. A minimal streaming upstream and the load generator run
// in their own processes; the router runs here, as the service builds it (routing file, tracker,
// in-memory affinity, decision log serialized to a discarded stream), on this process's one
// event loop. Open loop at --rate requests/s: first-byte and total latency direct to the upstream
// and through the router, and the difference; then closed loop at --concurrency for the router's
// requests/s.
//   node bench/hop.mjs [--rate 1000] [--seconds 5] [--concurrency 64]
// Build first (pnpm exec tsc -p tsconfig.build.json). Writes docs/benchmarks/router-hop.json.
// Targets: <= 1 ms p50 and <= 5 ms p99 added at 1,000 requests/s.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, '..');
const repo = resolve(pkg, '../..');
const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '1000' },
    seconds: { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '64' },
  },
});

const common = await import('@strata/common');
const { buildApp } = await import(join(pkg, 'dist/app.js'));
const { configSchema, configEnv } = await import(join(pkg, 'dist/config.js'));
const { buildRouterParts } = await import(join(pkg, 'dist/wiring.js'));

function child(script, args = []) {
  const proc = spawn(process.execPath, [join(here, script), ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const firstLine = new Promise((resolveLine, reject) => {
    let buf = '';
    proc.stdout.on('data', (d) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolveLine(JSON.parse(buf.slice(0, nl)));
    });
    proc.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
  });
  return { proc, firstLine };
}

const upstream = child('hop-upstream.mjs');
const { url: upstreamUrl } = await upstream.firstLine;
const dir = mkdtempSync(join(tmpdir(), 'strata-hop-'));
const routes = join(dir, 'routes.yaml');
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
const routerUrl = `http://127.0.0.1:${app.server.address().port}`;

const run = async (job) => await child('hop-client.mjs', [JSON.stringify(job)]).firstLine;
const rate = Number(values.rate);
const seconds = Number(values.seconds);
await run({ url: routerUrl, mode: 'open', rate: 200, seconds: 1 }); // warm-up
const direct = await run({ url: upstreamUrl, mode: 'open', rate, seconds });
const routed = await run({ url: routerUrl, mode: 'open', rate, seconds });
const closed = await run({
  url: routerUrl,
  mode: 'closed',
  concurrency: Number(values.concurrency),
  seconds,
});

await app.close();
await parts.close();
upstream.proc.kill();

const added = {
  first_byte_p50: routed.first_byte_ms.p50 - direct.first_byte_ms.p50,
  first_byte_p99: routed.first_byte_ms.p99 - direct.first_byte_ms.p99,
  total_p50: routed.total_ms.p50 - direct.total_ms.p50,
  total_p99: routed.total_ms.p99 - direct.total_ms.p99,
};
const f = (x) => x.toFixed(3).padStart(8);
console.log(
  `\nrouter hop, open loop at ${rate} req/s for ${seconds} s (${cpus().length} cores; router on one event loop)`,
);
console.log('                      first byte p50      p99 |    total p50      p99 |   req/s  errors');
for (const [name, r] of [
  ['direct to upstream', direct],
  ['through the router', routed],
]) {
  console.log(
    `${name.padEnd(20)} ${f(r.first_byte_ms.p50)} ${f(r.first_byte_ms.p99)} | ${f(r.total_ms.p50)} ${f(r.total_ms.p99)} | ${r.rps.toFixed(0).padStart(7)} ${String(r.errors).padStart(7)}`,
  );
}
console.log(
  `${'added by the router'.padEnd(20)} ${f(added.first_byte_p50)} ${f(added.first_byte_p99)} | ${f(added.total_p50)} ${f(added.total_p99)} |`,
);
console.log(
  `closed loop, ${values.concurrency} concurrent: ${closed.rps.toFixed(0)} req/s through the router (${closed.errors} errors)`,
);
console.log(
  `targets: added p50 <= 1 ms (${added.total_p50 <= 1 ? 'met' : 'NOT met'}), p99 <= 5 ms (${added.total_p99 <= 5 ? 'met' : 'NOT met'}) at 1,000 req/s`,
);
const out = join(repo, 'docs', 'benchmarks');
mkdirSync(out, { recursive: true });
writeFileSync(
  join(out, 'router-hop.json'),
  `${JSON.stringify({ command: 'node services/router-service/bench/hop.mjs', date: new Date().toISOString(), machine: { cpu: cpus()[0]?.model, cores: cpus().length }, rate, seconds, direct, routed, added, closed_loop: { concurrency: Number(values.concurrency), ...closed } }, null, 2)}\n`,
);
console.log('wrote docs/benchmarks/router-hop.json');
process.exit(0);
