// `strata-platform up`: the local platform on its embedded defaults, in the foreground until
// Ctrl-C or SIGTERM (scripts/strata up).
import { defaultModelDir, SERVICE_NAMES, type ServiceName, startPlatform } from './platform.js';

export async function upCommand(options: {
  host: string;
  ephemeral: boolean;
  quiet: boolean;
}): Promise<void> {
  const width = Math.max(...SERVICE_NAMES.map((n) => n.length));
  const platform = await startPlatform({
    host: options.host,
    ...(options.ephemeral ? { ports: Object.fromEntries(SERVICE_NAMES.map((n) => [n, 0])) } : {}),
    onLine: (name: ServiceName, line: string) => {
      if (!options.quiet) process.stdout.write(`[${name.padEnd(width)}] ${line}\n`);
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
}
