// Service processes for the local launcher, the load harness and end-to-end tests: spawn a
// Strata service's entry point, resolve once its "listening" log line names its address, stop
// with SIGTERM (the service drains) and SIGKILL after a grace period.
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

export interface SpawnServiceOptions {
  /** Tag for log lines and errors (e.g. "backend-1"). */
  label: string;
  /** The service's main.js. */
  entry: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0: a free port. */
  port?: number;
  env?: NodeJS.ProcessEnv;
  /** Every stdout and stderr line; without it stderr goes to this process's stderr. */
  onLine?: (label: string, line: string, stream: 'stdout' | 'stderr') => void;
  /** Default 60 s. */
  startTimeoutMs?: number;
  /**
   * Keep a stdin pipe open as a lifeline: when the parent dies, even by SIGKILL, it closes and
   * the service shuts down (STRATA_EXIT_WITH_STDIN) instead of running on as an orphan.
   */
  lifeline?: boolean;
}

export interface SpawnedService {
  child: ChildProcess;
  /** http://host:port from the service's own log line. */
  url: string;
}

export function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** SIGTERM (the services drain), then SIGKILL once graceMs have passed. */
export async function stopChild(child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await waitForExit(child);
  clearTimeout(timer);
}

export function spawnService(options: SpawnServiceOptions): Promise<SpawnedService> {
  const { label, onLine } = options;
  const child = spawn(process.execPath, [options.entry], {
    env: {
      ...process.env,
      ...options.env,
      HOST: options.host ?? '127.0.0.1',
      PORT: String(options.port ?? 0),
      ...(options.lifeline ? { STRATA_EXIT_WITH_STDIN: '1' } : {}),
    },
    stdio: [options.lifeline ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  const timeoutMs = options.startTimeoutMs ?? 60_000;
  return new Promise((resolve, reject) => {
    const stderr: string[] = [];
    const timer = setTimeout(() => {
      child.kill('SIGKILL'); // never leave a process behind a failed start
      reject(new Error(`${label} did not start listening within ${timeoutMs} ms`));
    }, timeoutMs);
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      onLine?.(label, line, 'stdout');
      try {
        const record = JSON.parse(line) as { msg?: string; address?: string };
        if (record.msg === 'listening' && record.address) {
          clearTimeout(timer);
          resolve({ child, url: record.address });
        }
      } catch {
        // not a JSON log line; already passed to onLine
      }
    });
    createInterface({ input: child.stderr as NodeJS.ReadableStream }).on('line', (line) => {
      // The last lines are enough to say why a start failed.
      if (stderr.push(line) > 40) stderr.shift();
      if (onLine) onLine(label, line, 'stderr');
      else process.stderr.write(`${line}\n`);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(`${label} exited before listening (code ${code}, signal ${signal}): ${stderr.join('\n')}`),
      );
    });
  });
}
