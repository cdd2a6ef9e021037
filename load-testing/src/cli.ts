#!/usr/bin/env node
// strata-platform up [--host H] [--ephemeral]
// Starts the local platform and keeps it in the foreground until Ctrl-C or SIGTERM.
import { parseArgs } from 'node:util';
import { defaultModelDir, SERVICE_NAMES, type ServiceName, startPlatform } from './platform.js';

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    ephemeral: { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
  },
});

if (positionals[0] !== 'up') {
  process.stderr.write('usage: strata-platform up [--host HOST] [--ephemeral] [--quiet]\n');
  process.exit(2);
}

const width = Math.max(...SERVICE_NAMES.map((n) => n.length));
const platform = await startPlatform({
  host: values.host,
  ...(values.ephemeral ? { ports: Object.fromEntries(SERVICE_NAMES.map((n) => [n, 0])) } : {}),
  onLine: (name: ServiceName, line: string) => {
    if (!values.quiet) process.stdout.write(`[${name.padEnd(width)}] ${line}\n`);
  },
});

const model = defaultModelDir();
process.stdout.write('\nStrata local platform is up (embedded defaults: CPU engine, in-memory stores):\n');
process.stdout.write(
  model
    ? `  model: ${model} (the backend turns ready after warmup)\n`
    : '  model: none found: set STRATA_MODEL_DIR to a Hugging Face model directory\n',
);
for (const s of platform.services) {
  process.stdout.write(
    `  ${s.name.padEnd(width)}  ${s.url}   /health/live  /health/ready  /metrics   (pid ${s.pid})\n`,
  );
}
process.stdout.write('Press Ctrl-C to stop.\n');

let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`\n${signal}: draining and stopping the services...\n`);
    platform.stop().then(() => process.exit(0));
  });
}
