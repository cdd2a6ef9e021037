// Child processes for the launcher and the harness: spawn a Strata service (a Node entry point)
// and resolve once its "listening" log line names its address; stop with SIGTERM then SIGKILL.
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

export interface SpawnServiceOptions {
  /** Tag for log lines and errors (e.g. "backend-1"). */
  label: string;
  /** The service's main.js. */
  entry: string;
  host: string;
  /** 0 picks a free port. */
  port: number;
  env?: NodeJS.ProcessEnv;
  onLine?: (label: string, line: string) => void;
  startTimeoutMs?: number;
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
      HOST: options.host,
      PORT: String(options.port),
      // The stdin pipe is a lifeline: when this launcher dies, even by SIGKILL, it closes and
      // the service shuts down instead of running on as an orphan.
      STRATA_EXIT_WITH_STDIN: '1',
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const timeoutMs = options.startTimeoutMs ?? 60_000;
  return new Promise((resolve, reject) => {
    const stderr: string[] = [];
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${label} did not start listening within ${timeoutMs} ms`));
    }, timeoutMs);
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      onLine?.(label, line);
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
      onLine?.(label, line);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(`${label} exited before listening (code ${code}, signal ${signal}): ${stderr.join('\n')}`),
      );
    });
  });
}
