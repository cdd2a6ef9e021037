#!/usr/bin/env node
// strata-platform up [--host H] [--ephemeral] [--quiet] [--verbose] [--log-dir D]
//   Starts the local platform and keeps it in the foreground until Ctrl-C or SIGTERM. The
//   services' JSON logs go to .strata/run/<time>/logs/<service>.log (or --log-dir); the console
//   shows a line per request (none with --quiet), warnings and errors, or with --verbose (-v)
//   every raw log line.
// strata-platform load <smoke|steady|ramp|spike|soak> [--no-prometheus] [--no-plot] [--out-dir D]
//   Starts the full harness, runs that k6 suite against it, saves summary + plot (STRATA_* knobs
//   of the suites come from the environment, e.g. STRATA_RATE=8 STRATA_DURATION=2m).
import { parseArgs } from 'node:util';
import { loadCommand } from './load-command.js';
import { upCommand } from './up-command.js';

const usage =
  'usage: strata-platform up [--host HOST] [--ephemeral] [--quiet] [--verbose|-v] [--log-dir DIR]\n' +
  '       strata-platform load <smoke|steady|ramp|spike|soak> [--no-prometheus] [--no-plot] [--out-dir DIR]\n';

function parse() {
  try {
    return parseArgs({
      allowPositionals: true,
      options: {
        host: { type: 'string', default: '127.0.0.1' },
        ephemeral: { type: 'boolean', default: false },
        quiet: { type: 'boolean', default: false },
        verbose: { type: 'boolean', short: 'v', default: false },
        'log-dir': { type: 'string' },
        'no-prometheus': { type: 'boolean', default: false },
        'no-plot': { type: 'boolean', default: false },
        'out-dir': { type: 'string' },
      },
    });
  } catch (err) {
    process.stderr.write(`strata-platform: ${(err as Error).message}\n${usage}`);
    process.exit(2);
  }
}

const { positionals, values } = parse();

if (positionals[0] === 'up') {
  await upCommand({
    host: values.host,
    ephemeral: values.ephemeral,
    quiet: values.quiet,
    verbose: values.verbose,
    ...(values['log-dir'] ? { logDir: values['log-dir'] } : {}),
  });
} else if (positionals[0] === 'load' && positionals[1]) {
  const code = await loadCommand({
    scenario: positionals[1],
    prometheus: !values['no-prometheus'],
    plot: !values['no-plot'],
    ...(values['out-dir'] ? { outDir: values['out-dir'] } : {}),
  });
  process.exit(code);
} else {
  process.stderr.write(usage);
  process.exit(2);
}
