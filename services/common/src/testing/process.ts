// Real service processes for end-to-end tests: the built `dist/main.js` of a service on a free
// port (@strata/common spawnService), optionally with every JSON log line kept for assertions.

import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { spawnService, waitForExit } from '../spawn.js';

export interface ServiceProcess {
  name: string;
  url: string;
  child: ChildProcess;
  /** Signals the process (SIGTERM: it drains) and waits for it to exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export interface LoggedServiceProcess extends ServiceProcess {
  /** Every JSON line the process printed, in order. */
  logs: Record<string, unknown>[];
}

export interface StartServiceOptions {
  /** Environment on top of this process's; LOG_LEVEL defaults to info (the 'listening' line). */
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

export async function startServiceProcess(
  name: string,
  entry: string,
  options: StartServiceOptions = {},
): Promise<ServiceProcess> {
  const { onLine } = options;
  const { child, url } = await spawnService({
    label: name,
    entry,
    env: { LOG_LEVEL: 'info', ...options.env },
    startTimeoutMs: options.startTimeoutMs ?? 30_000,
    // stdout lines to the caller; stderr to the test's own output.
    onLine: (_label, line, stream) => {
      if (stream === 'stdout') onLine?.(line);
      else process.stderr.write(`${line}\n`);
    },
  });
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    await waitForExit(child);
  };
  return { name, url, child, stop };
}

/** startServiceProcess, keeping every JSON line the process prints in `logs`. */
export async function startLoggedServiceProcess(
  name: string,
  entry: string,
  options: Omit<StartServiceOptions, 'onLine'> = {},
): Promise<LoggedServiceProcess> {
  const logs: Record<string, unknown>[] = [];
  const service = await startServiceProcess(name, entry, {
    ...options,
    onLine: (line) => {
      try {
        logs.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        // not a JSON log line
      }
    },
  });
  return { ...service, logs };
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
