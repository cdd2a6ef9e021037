#!/usr/bin/env node
// strata-platform up [--host H] [--ephemeral] [--quiet]
//   Starts the local platform and keeps it in the foreground until Ctrl-C or SIGTERM.
// strata-platform load <smoke|steady|ramp|spike|soak> [--no-prometheus] [--no-plot] [--out-dir D]
//   Starts the full harness, runs that k6 suite against it, saves summary + plot (STRATA_* knobs
//   of the suites come from the environment, e.g. STRATA_RATE=8 STRATA_DURATION=2m).
import { parseArgs } from 'node:util';
import { loadCommand } from './load-command.js';
import { upCommand } from './up-command.js';

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    ephemeral: { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
    'no-prometheus': { type: 'boolean', default: false },
    'no-plot': { type: 'boolean', default: false },
    'out-dir': { type: 'string' },
  },
});

const usage =
  'usage: strata-platform up [--host HOST] [--ephemeral] [--quiet]\n' +
  '       strata-platform load <smoke|steady|ramp|spike|soak> [--no-prometheus] [--no-plot] [--out-dir DIR]\n';

if (positionals[0] === 'up') {
  await upCommand({ host: values.host, ephemeral: values.ephemeral, quiet: values.quiet });
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
