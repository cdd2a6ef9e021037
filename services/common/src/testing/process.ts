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

/** A test model that may be missing: tests skip without it, saying which and why. */
export interface OptionalModel {
  /** The model's path when it exists, else undefined. */
  path: string | undefined;
  /** '' when present, else ' (skipped: <name> not found: <why>)', to append to a describe/it title. */
  skipped: string;
}

/** Where test model `name` is in STRATA_MODELS_DIR, or why it is not there. */
function findTestModel(name: string): { path: string } | { missing: string } {
  const root = process.env.STRATA_MODELS_DIR;
  if (!root) return { missing: 'STRATA_MODELS_DIR is not set' };
  const path = join(root, name);
  return existsSync(path) ? { path } : { missing: `not in STRATA_MODELS_DIR (${root})` };
}

/**
 * The answer for a test model that is not there: a skip naming it, so a fresh clone without the
 * models passes; but with STRATA_REQUIRE_MODELS=1 (CI, which always has them) an Error, so a
 * missing model can never pass as a silent skip.
 */
export function missingTestModel(name: string, why: string): OptionalModel {
  const reason = `${name} not found: ${why}`;
  if (process.env.STRATA_REQUIRE_MODELS === '1') {
    throw new Error(`${reason}, and STRATA_REQUIRE_MODELS=1 makes that a failure`);
  }
  return { path: undefined, skipped: ` (skipped: ${reason})` };
}

/**
 * Test model `name` (a folder or file in STRATA_MODELS_DIR, e.g. 'tinystories-656k-gguf/x.gguf'),
 * looked up at module load for: describe.skipIf(!model.path)(`title${model.skipped}`, ...).
 * Throws when it is missing under STRATA_REQUIRE_MODELS=1 (see missingTestModel).
 */
export function optionalTestModel(name = 'tinystories-656k'): OptionalModel {
  const found = findTestModel(name);
  return 'path' in found ? { path: found.path, skipped: '' } : missingTestModel(name, found.missing);
}

/**
 * Test model `name` (default tinystories-656k) where a test cannot do without it, e.g. inside a
 * block that optionalTestModel already skips when it is missing; throws saying what to set.
 */
export function testModelDir(name = 'tinystories-656k'): string {
  const found = findTestModel(name);
  if ('missing' in found) throw new Error(`${name} not found: ${found.missing}`);
  return found.path;
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
