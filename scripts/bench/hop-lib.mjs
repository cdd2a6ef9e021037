// What one proxy hop adds, measured the same way for every Strata hop (router, edge): a minimal
// streaming upstream and the load generator run in their own processes, the service under test
// runs in the caller's process on its one event loop. Each run begins with `warmup` seconds at
// full load that are not measured (connection pools grow, code gets compiled: otherwise the
// first half second's cold connections make the whole p99). Open loop at `rate` requests/s: first-byte
// and total latency direct to the upstream and through the hop, and the difference; then closed
// loop at `concurrency` for the hop's requests/s. Prints a table; writes docs/benchmarks/<out>.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');

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

/** The command line every hop benchmark takes: [--rate 1000] [--seconds 5] [--concurrency 64] [--warmup 2]. */
export function hopArgs() {
  const { values } = parseArgs({
    options: {
      rate: { type: 'string', default: '1000' },
      seconds: { type: 'string', default: '5' },
      concurrency: { type: 'string', default: '64' },
    },
  });
  return {
    rate: Number(values.rate),
    seconds: Number(values.seconds),
    concurrency: Number(values.concurrency),
  };
}

/**
 * @param {object} o
 * @param {string} o.hop        what is measured, e.g. 'router'
 * @param {(upstreamUrl: string) => Promise<{url: string, close: () => Promise<void>}>} o.start
 * @param {Record<string,string>} [o.headers]  sent with every request (e.g. an API key)
 * @param {number} o.rate  @param {number} o.seconds  @param {number} o.concurrency
 * @param {number} [o.warmup]  unmeasured seconds at full load before each run (default 2)
 * @param {string} o.out   file name under docs/benchmarks/
 * @param {string} o.command  the command that reproduces the run
 * @param {string} o.undici   import.meta.resolve('undici') of the calling package
 */
export async function measureHop(o) {
  const upstream = child('hop-upstream.mjs');
  process.on('exit', () => upstream.proc.kill()); // also when the run fails
  const { url: upstreamUrl } = await upstream.firstLine;
  const service = await o.start(upstreamUrl);
  const run = async (job) =>
    await child('hop-client.mjs', [JSON.stringify({ headers: o.headers ?? {}, undici: o.undici, ...job })])
      .firstLine;
  // Every run starts with o.warmup seconds at full load that are not measured (hop-client.mjs).
  const warmup = o.warmup ?? 2;
  const direct = await run({ url: upstreamUrl, mode: 'open', rate: o.rate, seconds: o.seconds, warmup });
  // The hop's own event loop while it carries the measured open loop: a stall here is the hop's.
  const loop = monitorEventLoopDelay({ resolution: 1 });
  const measuring = setTimeout(() => loop.enable(), warmup * 1000);
  const hopped = await run({ url: service.url, mode: 'open', rate: o.rate, seconds: o.seconds, warmup });
  clearTimeout(measuring);
  loop.disable();
  const loopDelay = { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 };
  const closed = await run({
    url: service.url,
    mode: 'closed',
    concurrency: o.concurrency,
    seconds: o.seconds,
    warmup,
  });
  await service.close();
  upstream.proc.kill();

  const added = {
    first_byte_p50: hopped.first_byte_ms.p50 - direct.first_byte_ms.p50,
    first_byte_p99: hopped.first_byte_ms.p99 - direct.first_byte_ms.p99,
    total_p50: hopped.total_ms.p50 - direct.total_ms.p50,
    total_p99: hopped.total_ms.p99 - direct.total_ms.p99,
  };
  const f = (x) => x.toFixed(3).padStart(8);
  const through = `through the ${o.hop}`;
  console.log(
    `\n${o.hop} hop, open loop at ${o.rate} req/s for ${o.seconds} s (${cpus().length} cores; ${o.hop} on one event loop)`,
  );
  console.log('                      first byte p50      p99 |    total p50      p99 |   req/s  errors');
  for (const [name, r] of [
    ['direct to upstream', direct],
    [through, hopped],
  ]) {
    console.log(
      `${name.padEnd(20)} ${f(r.first_byte_ms.p50)} ${f(r.first_byte_ms.p99)} | ${f(r.total_ms.p50)} ${f(r.total_ms.p99)} | ${r.rps.toFixed(0).padStart(7)} ${String(r.errors).padStart(7)}`,
    );
  }
  console.log(
    `${`added by the ${o.hop}`.padEnd(20)} ${f(added.first_byte_p50)} ${f(added.first_byte_p99)} | ${f(added.total_p50)} ${f(added.total_p99)} |`,
  );
  console.log(
    `${o.hop} event-loop delay during the open loop (ms): p50 ${loopDelay.p50.toFixed(2)}, p99 ${loopDelay.p99.toFixed(2)}, max ${loopDelay.max.toFixed(2)}`,
  );
  console.log(
    `closed loop, ${o.concurrency} concurrent: ${closed.rps.toFixed(0)} req/s ${through} (${closed.errors} errors)`,
  );
  console.log(
    `targets: added p50 <= 1 ms (${added.total_p50 <= 1 ? 'met' : 'NOT met'}), p99 <= 5 ms (${added.total_p99 <= 5 ? 'met' : 'NOT met'}) at 1,000 req/s`,
  );
  const dir = join(repo, 'docs', 'benchmarks');
  mkdirSync(dir, { recursive: true });
  const report = {
    command: o.command,
    date: new Date().toISOString(),
    machine: { cpu: cpus()[0]?.model, cores: cpus().length },
    rate: o.rate,
    seconds: o.seconds,
    warmup_seconds: warmup,
    direct,
    [o.hop === 'router' ? 'routed' : o.hop]: hopped,
    added,
    event_loop_delay_ms: loopDelay,
    closed_loop: { concurrency: o.concurrency, ...closed },
  };
  writeFileSync(join(dir, o.out), `${JSON.stringify(report, null, 2)}\n`);
  console.log(`wrote docs/benchmarks/${o.out}`);
}

/**
 * Starts the service under test as its package builds it, from the package's dist/ (app.js,
 * config.js, wiring.js) next to the calling bench/hop.mjs: the config read from `env`, a logger
 * that serializes every line to a discarded stream, real metrics, listening on port 0.
 * @param {object} o
 * @param {string} o.benchUrl  import.meta.url of the calling bench/hop.mjs
 * @param {any} o.common       the calling package's @strata/common
 * @param {string} o.service   the service name, e.g. 'router-service'
 * @param {Record<string,string>} o.env
 * @param {(wiring: any, config: any, logger: any, metrics: any) => Promise<{parts: any, close: () => Promise<void>}>} o.wire
 *   the service's parts (buildApp's second argument) and how to close them
 * @returns {Promise<{url: string, close: () => Promise<void>}>}
 */
export async function startHopService(o) {
  const pkg = resolve(dirname(fileURLToPath(o.benchUrl)), '..');
  const { buildApp } = await import(join(pkg, 'dist/app.js'));
  const { configSchema, configEnv } = await import(join(pkg, 'dist/config.js'));
  const wiring = await import(join(pkg, 'dist/wiring.js'));
  const { common } = o;
  const config = common.loadConfig({ schema: configSchema, envMap: configEnv, env: o.env });
  const logger = common.createLogger({
    service: o.service,
    destination: new Writable({ write: (_c, _e, done) => done() }),
  });
  const metrics = common.createMetrics(o.service);
  const wired = await o.wire(wiring, config, logger, metrics);
  const app = buildApp({ config, logger, metrics, readiness: new common.Readiness() }, wired.parts);
  await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url: `http://127.0.0.1:${app.server.address().port}`,
    close: async () => {
      await app.close();
      await wired.close();
    },
  };
}
