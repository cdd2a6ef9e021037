// A Strata service the harness can kill and bring back on the same port (the routing file names
// backends by URL), remembering every exit nobody asked for: a crash is a test failure.
import type { ChildProcess } from 'node:child_process';
import { spawnService, stopChild, waitForExit } from '@strata/common';

export interface ManagedServiceSpec {
  label: string;
  entry: string;
  host: string;
  /** 0: a free port on first start, then kept. */
  port: number;
  env: NodeJS.ProcessEnv;
  onLine?: (label: string, line: string) => void;
}

export class ManagedService {
  readonly label: string;
  /** Exits nobody asked for, as "label: code X signal Y". */
  readonly crashes: string[] = [];
  private child: ChildProcess | undefined;
  private port: number;
  private address = '';
  private expectingExit = false;

  constructor(private readonly spec: ManagedServiceSpec) {
    this.label = spec.label;
    this.port = spec.port;
  }

  get url(): string {
    return this.address;
  }

  get pid(): number {
    return this.child?.pid ?? -1;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  async start(): Promise<void> {
    const { child, url } = await spawnService({
      label: this.spec.label,
      entry: this.spec.entry,
      host: this.spec.host,
      port: this.port,
      env: this.spec.env,
      // stderr included; lines nobody asked for are dropped, as stdout's are.
      onLine: (label, line) => this.spec.onLine?.(label, line),
      lifeline: true,
    });
    this.child = child;
    this.address = url;
    this.port = Number(new URL(url).port);
    this.expectingExit = false;
    child.once('exit', (code, signal) => {
      if (!this.expectingExit) this.crashes.push(`${this.label}: exit code ${code} signal ${signal}`);
    });
  }

  /** SIGSTOP: the process stops producing anything (kill() or SIGCONT end it). */
  freeze(): void {
    if (this.child && this.running) this.child.kill('SIGSTOP');
  }

  /** Kills the process outright (a crash the test causes on purpose). */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.child || !this.running) return;
    this.expectingExit = true;
    this.child.kill(signal);
    await waitForExit(this.child);
  }

  /** SIGTERM and drain; SIGKILL after graceMs. Resolves with the exit code (null when killed). */
  async stop(graceMs = 15_000): Promise<number | null> {
    if (!this.child) return null;
    this.expectingExit = true;
    await stopChild(this.child, graceMs);
    return this.child.exitCode;
  }
}
