// The real service process (node dist/main.js) for tests that need one: dist/ from the package
// build (the turbo test task runs after build; built here when missing), its JSON log lines
// collected, its address read from the 'listening' line.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Builds dist/ unless `file` (relative to dist/) is there already. */
export function ensureDist(file = 'main.js'): void {
  if (existsSync(join(root, 'dist', file))) return;
  execFileSync(
    process.execPath,
    [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'],
    {
      cwd: root,
      stdio: 'inherit',
    },
  );
}

export async function waitFor<T>(
  what: string,
  poll: () => Promise<T | undefined>,
  timeoutMs: number,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const value = await poll();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

export interface ServiceProcess {
  proc: ChildProcess;
  url: string;
  /** Every JSON log line so far. */
  logs: Record<string, unknown>[];
  /** The exit code, once it has exited. */
  exited: Promise<number | null>;
  /** SIGKILL unless it has exited. */
  kill(): void;
}

/** Starts dist/main.js with `env` over this process's and waits for its 'listening' line. */
export async function startService(env: Record<string, string>): Promise<ServiceProcess> {
  const proc = spawn(process.execPath, [join(root, 'dist', 'main.js')], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((done) => proc.once('exit', (code) => done(code)));
  const stderr: string[] = [];
  proc.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
  const logs: Record<string, unknown>[] = [];
  let address: string | undefined;
  createInterface({ input: proc.stdout as NodeJS.ReadableStream }).on('line', (line) => {
    try {
      const entry = JSON.parse(line) as Record<string, unknown>;
      logs.push(entry);
      if (entry.msg === 'listening' && typeof entry.address === 'string') address = entry.address;
    } catch {
      // not a log line
    }
  });
  const kill = () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  };
  const url = await waitFor('the listening line', async () => address, 15_000).catch((err: Error) => {
    kill();
    throw new Error(`${err.message}; stderr: ${stderr.join('')}`);
  });
  return { proc, url, logs, exited, kill };
}
