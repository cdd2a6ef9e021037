// A real Prometheus scraping the harness' services. The binary is the Debian package
// `prometheus` (scripts/ensure-prometheus.sh installs it when running as root).
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stopChild } from '@strata/common';
import { answers200, freePort, waitUntil } from './ports.js';

const ensureScript = join(dirname(fileURLToPath(import.meta.url)), '..', 'scripts', 'ensure-prometheus.sh');

export class PrometheusProcess {
  private child: ChildProcess | undefined;
  url = '';

  constructor(
    private readonly configFile: string,
    private readonly dataDir: string,
  ) {}

  /** Throws with the install hint from ensure-prometheus.sh when the binary is missing. */
  async start(): Promise<void> {
    const binary = execFileSync('bash', [ensureScript], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    }).trim();
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    this.child = spawn(
      binary,
      [
        `--config.file=${this.configFile}`,
        `--storage.tsdb.path=${this.dataDir}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      { stdio: ['ignore', 'ignore', 'ignore'] },
    );
    await waitUntil('Prometheus ready', () => answers200(`${this.url}/-/ready`), 60_000, 250);
  }

  async stop(): Promise<void> {
    if (this.child) await stopChild(this.child, 5_000);
  }
}
