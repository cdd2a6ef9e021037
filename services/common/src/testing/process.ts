// Real service processes for end-to-end tests: the built `dist/main.js` of a service, started on
// a free port, resolved once its JSON log says where it listens. A failed start never leaves a
// process behind.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';

export interface ServiceProcess {
  name: string;
  url: string;
  child: ChildProcess;
  /** Signals the process (SIGTERM: it drains) and waits for it to exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export interface StartServiceOptions {
  /** Environment on top of this process's; HOST and PORT default to 127.0.0.1 and 0. */
  env?: Record<string, string>;
  /** Every stdout line (JSON logs), e.g. to collect them for assertions. */
  onLine?: (line: string) => void;
  startTimeoutMs?: number;
}

/** The built entry point of a workspace service package, e.g. '@strata/router-service'. */
export function serviceEntry(pkg: string, from: string): string {
  return join(dirname(createRequire(from).resolve(pkg)), 'main.js');
}

/** A test model from STRATA_MODELS_DIR (default tinystories-656k); throws saying what to set. */
export function testModelDir(name = 'tinystories-656k'): string {
  const root = process.env.STRATA_MODELS_DIR;
  if (!root) throw new Error(`STRATA_MODELS_DIR is not set: point it at the folder holding ${name}/`);
  const dir = join(root, name);
  if (!existsSync(dir)) throw new Error(`${name} not found in STRATA_MODELS_DIR (${root})`);
  return dir;
}

export function startServiceProcess(
  name: string,
  entry: string,
  options: StartServiceOptions = {},
): Promise<ServiceProcess> {
  const child = spawn(process.execPath, [entry], {
    env: { ...process.env, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', ...options.env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill(signal);
    await exited;
  };
  const timeoutMs = options.startTimeoutMs ?? 30_000;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${name} did not listen within ${timeoutMs} ms`));
    }, timeoutMs);
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      options.onLine?.(line);
      if (!line.includes('"listening"')) return;
      const address = (JSON.parse(line) as { address?: string }).address;
      if (!address) return;
      clearTimeout(timer);
      resolve({ name, url: address, child, stop });
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with ${code} before listening`));
    });
  });
}

/** Waits until GET /health/ready answers 200. */
export async function waitReady(url: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const ok = await fetch(`${url}/health/ready`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url} not ready within ${timeoutMs} ms`);
}
