// A private redis-server for one harness, in the foreground so the harness owns it; stop() and
// start() model a Redis outage and its return on the same port.
import { type ChildProcess, spawn } from 'node:child_process';
import { waitForExit } from '@strata/common';
import { ping } from '@strata/common/testing';
import { waitUntil } from './ports.js';

export class RedisProcess {
  readonly crashes: string[] = [];
  private child: ChildProcess | undefined;
  private expectingExit = false;

  constructor(
    readonly port: number,
    private readonly dir: string,
  ) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  async start(): Promise<void> {
    if (this.running) throw new Error('redis-server is already running');
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        this.dir,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    child.once('error', (err) => this.crashes.push(`redis: ${err.message} (is redis-server installed?)`));
    this.child = child;
    this.expectingExit = false;
    child.once('exit', (code, signal) => {
      if (!this.expectingExit) this.crashes.push(`redis: exit code ${code} signal ${signal}`);
    });
    await waitUntil(`redis-server on port ${this.port}`, () => ping(this.port, '127.0.0.1', 1_000), 15_000);
  }

  /** SIGTERM: Redis shuts down (nothing to save: --save ''). */
  async stop(): Promise<void> {
    if (!this.child || !this.running) return;
    this.expectingExit = true;
    this.child.kill('SIGTERM');
    await waitForExit(this.child);
  }
}
