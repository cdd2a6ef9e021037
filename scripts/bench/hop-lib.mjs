// What one proxy hop adds, measured the same way for every Strata hop (router, edge): a minimal
// streaming upstream, a bare node:http keep-alive proxy (the baseline: what any Node proxy costs
// on this machine) and the load generator run in their own processes, the service under test
// runs in the caller's process on its one event loop. Each run begins with `warmup` seconds at
// full load that are not measured (connection pools grow, code gets compiled: otherwise the
// first half second's cold connections make the whole p99). A round is: open loop at `rate`
// requests/s direct to the upstream, through the bare proxy and through the hop (first-byte and
// total latency), then closed loop at `concurrency` through the bare proxy and the hop
// (requests/s). Rounds repeat, the bare proxy and the hop swapping order, so that the machine's
// other work falls on both; every run reports the hop's p99 and req/s as ratios to the bare
// proxy's, with the spread over the rounds. Prints a table; writes docs/benchmarks/<out>.
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
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

/**
 * The command line every hop benchmark takes:
 * [--rate 1000] [--seconds 5] [--concurrency 64] [--rounds 3] [--warmup 2].
 */
export function hopArgs() {
  const { values } = parseArgs({
    options: {
      rate: { type: 'string', default: '1000' },
      seconds: { type: 'string', default: '5' },
      concurrency: { type: 'string', default: '64' },
      rounds: { type: 'string', default: '3' },
      warmup: { type: 'string', default: '2' },
    },
  });
  return {
    rate: Number(values.rate),
    seconds: Number(values.seconds),
    concurrency: Number(values.concurrency),
    rounds: Number(values.rounds),
    warmup: Number(values.warmup),
  };
}

// CPU time (user + system, µs) a proxy used so far: this process (the hop) or a child's (the
// bare proxy; from /proc, Linux only, in clock ticks). Wall-clock latency on a shared machine
// also counts time the process waited for a core; CPU per request does not.
const CLOCK_TICK_US = 10_000; // USER_HZ is 100 on Linux
function cpuMicros(pid) {
  if (pid === undefined) {
    const { user, system } = process.cpuUsage();
    return user + system;
  }
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * CLOCK_TICK_US; // utime, stime
  } catch {
    return Number.NaN;
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
};
/** Median, lowest and highest of one figure over the rounds, and each round's value. */
const spread = (xs) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs), rounds: xs });

/**
 * @param {object} o
 * @param {string} o.hop        what is measured, e.g. 'router'
 * @param {(upstreamUrl: string) => Promise<{url: string, close: () => Promise<void>}>} o.start
 * @param {Record<string,string>} [o.headers]  sent with every request (e.g. an API key)
 * @param {number} o.rate  @param {number} o.seconds  @param {number} o.concurrency
 * @param {number} [o.rounds]  rounds of direct, bare proxy and hop (default 3)
 * @param {number} [o.warmup]  unmeasured seconds at full load before each run (default 2)
 * @param {string} o.out   file name under docs/benchmarks/
 * @param {string} o.command  the command that reproduces the run
 * @param {string} o.undici   import.meta.resolve('undici') of the calling package
 */
export async function measureHop(o) {
  const upstream = child('hop-upstream.mjs');
  process.on('exit', () => upstream.proc.kill()); // also when the run fails
  const { url: upstreamUrl } = await upstream.firstLine;
  // The baseline: a bare node:http keep-alive proxy in its own process (hop-bare.mjs).
  const bare = child('hop-bare.mjs', [upstreamUrl]);
  process.on('exit', () => bare.proc.kill());
  const { url: bareUrl } = await bare.firstLine;
  const service = await o.start(upstreamUrl);
  const run = async (job) =>
    await child('hop-client.mjs', [JSON.stringify({ headers: o.headers ?? {}, undici: o.undici, ...job })])
      .firstLine;
  // Every run starts with o.warmup seconds at full load that are not measured (hop-client.mjs).
  const warmup = o.warmup ?? 2;
  const rounds = o.rounds ?? 3;
  const open = (url) => run({ url, mode: 'open', rate: o.rate, seconds: o.seconds, warmup });
  // The closed loop also reports the proxy's CPU time per measured request.
  const closed = async (url, pid) => {
    let before = Number.NaN;
    const measuring = setTimeout(() => {
      before = cpuMicros(pid);
    }, warmup * 1000);
    const result = await run({ url, mode: 'closed', concurrency: o.concurrency, seconds: o.seconds, warmup });
    clearTimeout(measuring);
    return { ...result, proxy_cpu_us_per_request: (cpuMicros(pid) - before) / result.requests };
  };
  // The hop's own event loop while it carries the measured open loop: a stall here is the hop's.
  const openThroughHop = async () => {
    const loop = monitorEventLoopDelay({ resolution: 1 });
    const measuring = setTimeout(() => loop.enable(), warmup * 1000);
    const result = await open(service.url);
    clearTimeout(measuring);
    loop.disable();
    return {
      result,
      loopDelay: { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 },
    };
  };

  // Rounds interleave the three paths, so that whatever else the machine does at the time falls
  // on all of them alike; the bare proxy and the hop swap places every round.
  const results = [];
  for (let i = 0; i < rounds; i++) {
    const hopFirst = i % 2 === 1;
    const direct = await open(upstreamUrl);
    let bareOpen;
    let hopOpen;
    if (hopFirst) {
      hopOpen = await openThroughHop();
      bareOpen = await open(bareUrl);
    } else {
      bareOpen = await open(bareUrl);
      hopOpen = await openThroughHop();
    }
    let bareClosed;
    let hopClosed;
    if (hopFirst) {
      hopClosed = await closed(service.url);
      bareClosed = await closed(bareUrl, bare.proc.pid);
    } else {
      bareClosed = await closed(bareUrl, bare.proc.pid);
      hopClosed = await closed(service.url);
    }
    const round = {
      direct,
      bare: bareOpen,
      hop: hopOpen.result,
      loopDelay: hopOpen.loopDelay,
      closed: { bare: bareClosed, hop: hopClosed },
    };
    results.push(round);
    const r = ratios(round);
    console.log(
      `round ${i + 1}/${rounds}: total p99 direct ${round.direct.total_ms.p99.toFixed(2)} ms, bare ${round.bare.total_ms.p99.toFixed(2)} ms, ${o.hop} ${round.hop.total_ms.p99.toFixed(2)} ms (${r.p99.toFixed(2)}x bare); ` +
        `req/s bare ${bareClosed.rps.toFixed(0)}, ${o.hop} ${hopClosed.rps.toFixed(0)} (${r.rps.toFixed(2)}x bare); ` +
        `CPU per request bare ${bareClosed.proxy_cpu_us_per_request.toFixed(0)} µs, ${o.hop} ${hopClosed.proxy_cpu_us_per_request.toFixed(0)} µs`,
    );
  }
  await service.close();
  bare.proc.kill();
  upstream.proc.kill();

  const f = (x) => x.toFixed(3).padStart(8);
  const through = `through the ${o.hop}`;
  console.log(
    `\n${o.hop} hop, open loop at ${o.rate} req/s for ${o.seconds} s, ${rounds} rounds (${cpus().length} cores; ${o.hop} on one event loop)`,
  );
  console.log(
    '                         first byte p50      p99 |    total p50      p99 |   req/s  errors | closed req/s',
  );
  const row = (name, r, c) =>
    console.log(
      `${name.padEnd(24)} ${f(r.first_byte_ms.p50)} ${f(r.first_byte_ms.p99)} | ${f(r.total_ms.p50)} ${f(r.total_ms.p99)} | ${r.rps.toFixed(0).padStart(7)} ${String(r.errors).padStart(7)} | ${c === undefined ? '' : `${c.rps.toFixed(0).padStart(7)} (${c.errors} errors)`}`,
    );
  results.forEach((r, i) => {
    row(`${i + 1}: direct to upstream`, r.direct);
    row(`${i + 1}: bare node:http proxy`, r.bare, r.closed.bare);
    row(`${i + 1}: ${through}`, r.hop, r.closed.hop);
  });
  const perRound = results.map(ratios);
  const summary = {
    p99_ratio: spread(perRound.map((r) => r.p99)),
    rps_ratio: spread(perRound.map((r) => r.rps)),
    added_p50_vs_direct_ms: spread(results.map((r) => r.hop.total_ms.p50 - r.direct.total_ms.p50)),
    added_p99_vs_direct_ms: spread(results.map((r) => r.hop.total_ms.p99 - r.direct.total_ms.p99)),
    added_p99_vs_bare_ms: spread(results.map((r) => r.hop.total_ms.p99 - r.bare.total_ms.p99)),
    bare_added_p99_vs_direct_ms: spread(results.map((r) => r.bare.total_ms.p99 - r.direct.total_ms.p99)),
    cpu_us_per_request_bare: spread(results.map((r) => r.closed.bare.proxy_cpu_us_per_request)),
    cpu_us_per_request_hop: spread(results.map((r) => r.closed.hop.proxy_cpu_us_per_request)),
  };
  const s = (x, digits = 2) =>
    `${x.median.toFixed(digits)} (${x.min.toFixed(digits)}-${x.max.toFixed(digits)})`;
  console.log('\nmedian over the rounds (lowest-highest):');
  console.log(`  ${o.hop} p99 / bare proxy p99:         ${s(summary.p99_ratio)}x  (target <= 1.5x)`);
  console.log(`  ${o.hop} req/s / bare proxy req/s:     ${s(summary.rps_ratio)}x  (target >= 0.7x)`);
  console.log(`  p99 added over the bare proxy:    ${s(summary.added_p99_vs_bare_ms)} ms`);
  console.log(`  p50 added over direct:            ${s(summary.added_p50_vs_direct_ms)} ms`);
  console.log(`  p99 added over direct:            ${s(summary.added_p99_vs_direct_ms)} ms`);
  console.log(
    `  (the bare proxy adds p99          ${s(summary.bare_added_p99_vs_direct_ms)} ms over direct)`,
  );
  console.log(
    `  proxy CPU per request (closed loop): bare ${s(summary.cpu_us_per_request_bare, 0)} µs, ${o.hop} ${s(summary.cpu_us_per_request_hop, 0)} µs`,
  );
  console.log(
    `  ${o.hop} event-loop delay p99 ${s(spread(results.map((r) => r.loopDelay.p99)))} ms, max ${s(spread(results.map((r) => r.loopDelay.max)))} ms`,
  );
  console.log(
    `targets: p99 <= 1.5x bare (${summary.p99_ratio.median <= 1.5 ? 'met' : 'NOT met'}), req/s >= 0.7x bare (${summary.rps_ratio.median >= 0.7 ? 'met' : 'NOT met'})`,
  );

  // The round whose p99 ratio is the median stands for the run in the top-level fields.
  const order = perRound.map((r, i) => [r.p99, i]).sort((a, b) => a[0] - b[0]);
  const typical = results[order[Math.floor((order.length - 1) / 2)][1]];
  const hopKey = o.hop === 'router' ? 'routed' : o.hop;
  const dir = join(repo, 'docs', 'benchmarks');
  mkdirSync(dir, { recursive: true });
  const report = {
    command: [o.command, ...process.argv.slice(2)].join(' '),
    date: new Date().toISOString(),
    machine: { cpu: cpus()[0]?.model, cores: cpus().length },
    rate: o.rate,
    seconds: o.seconds,
    warmup_seconds: warmup,
    rounds,
    ratios: {
      [`${o.hop}_p99_over_bare_p99`]: summary.p99_ratio,
      [`${o.hop}_rps_over_bare_rps`]: summary.rps_ratio,
    },
    added_ms: {
      p50_vs_direct: summary.added_p50_vs_direct_ms,
      p99_vs_direct: summary.added_p99_vs_direct_ms,
      p99_vs_bare: summary.added_p99_vs_bare_ms,
      bare_p99_vs_direct: summary.bare_added_p99_vs_direct_ms,
    },
    proxy_cpu_us_per_request: {
      bare: summary.cpu_us_per_request_bare,
      [hopKey]: summary.cpu_us_per_request_hop,
    },
    typical_round: 1 + results.indexOf(typical),
    direct: typical.direct,
    bare: typical.bare,
    [hopKey]: typical.hop,
    added: {
      first_byte_p50: typical.hop.first_byte_ms.p50 - typical.direct.first_byte_ms.p50,
      first_byte_p99: typical.hop.first_byte_ms.p99 - typical.direct.first_byte_ms.p99,
      total_p50: typical.hop.total_ms.p50 - typical.direct.total_ms.p50,
      total_p99: typical.hop.total_ms.p99 - typical.direct.total_ms.p99,
    },
    event_loop_delay_ms: typical.loopDelay,
    closed_loop: { concurrency: o.concurrency, bare: typical.closed.bare, [hopKey]: typical.closed.hop },
    all_rounds: results.map((r) => ({
      direct: r.direct,
      bare: r.bare,
      [hopKey]: r.hop,
      event_loop_delay_ms: r.loopDelay,
      closed_loop: { bare: r.closed.bare, [hopKey]: r.closed.hop },
    })),
  };
  writeFileSync(join(dir, o.out), `${JSON.stringify(report, null, 2)}\n`);
  console.log(`wrote docs/benchmarks/${o.out}`);
}

/** One round's hop-to-bare ratios: total p99 (open loop) and req/s (closed loop). */
function ratios(round) {
  return {
    p99: round.hop.total_ms.p99 / round.bare.total_ms.p99,
    rps: round.closed.hop.rps / round.closed.bare.rps,
  };
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
