// Starts the whole local platform as child processes on their embedded defaults and reports
// where each service listens. Used by `scripts/strata up`, and by tests and load runs.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const SERVICE_NAMES = [
  'inference-backend',
  'router-service',
  'edge-gateway',
  'observability',
] as const;
export type ServiceName = (typeof SERVICE_NAMES)[number];

/** The ports `scripts/strata up` uses: vLLM's 8000 for the backend, dcgm-exporter's 9400 for the sidecar. */
export const DEFAULT_PORTS: Record<ServiceName, number> = {
  'inference-backend': 8000,
  'router-service': 8081,
  'edge-gateway': 8080,
  observability: 9400,
};

export interface RunningService {
  name: ServiceName;
  url: string;
  pid: number;
}

export interface Platform {
  services: RunningService[];
  /** SIGTERM to every service (they drain), SIGKILL to any still running after graceMs. */
  stop(graceMs?: number): Promise<void>;
}

export interface StartOptions {
  host?: string;
  /** Port per service; 0 picks a free one. Defaults to DEFAULT_PORTS. */
  ports?: Partial<Record<ServiceName, number>>;
  env?: NodeJS.ProcessEnv;
  /** Receives every line a service prints, already tagged with the service name. */
  onLine?: (service: ServiceName, line: string) => void;
  startTimeoutMs?: number;
}

const require = createRequire(import.meta.url);

function entryOf(name: ServiceName): string {
  return join(dirname(require.resolve(`@strata/${name}`)), 'main.js');
}

/** The small model the local platform serves by default (tinystories-656k). */
export const DEFAULT_MODEL = 'tinystories-656k';

/**
 * The backend's model: STRATA_MODEL_DIR, else DEFAULT_MODEL in STRATA_MODELS_DIR, else in
 * ../shared/models beside the repository; undefined when none exists (the backend then
 * runs, not ready, and says so).
 */
export function defaultModelDir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.STRATA_MODEL_DIR) return env.STRATA_MODEL_DIR;
  const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const candidates = [env.STRATA_MODELS_DIR, join(repo, '..', 'shared', 'models')].filter(
    (dir): dir is string => dir !== undefined && dir !== '',
  );
  return candidates
    .map((dir) => join(dir, DEFAULT_MODEL))
    .find((dir) => existsSync(join(dir, 'config.json')));
}

function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

// Resolves with the address from the service's "listening" log line.
function startService(
  name: ServiceName,
  port: number,
  options: StartOptions,
): Promise<{ child: ChildProcess; url: string }> {
  const model =
    name === 'inference-backend' ? defaultModelDir({ ...process.env, ...options.env }) : undefined;
  const child = spawn(process.execPath, [entryOf(name)], {
    env: {
      ...process.env,
      ...(model ? { STRATA_MODEL_DIR: model } : {}),
      ...options.env,
      HOST: options.host ?? '127.0.0.1',
      PORT: String(port),
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
      reject(new Error(`${name} did not start listening within ${timeoutMs} ms`));
    }, timeoutMs);
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      options.onLine?.(name, line);
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
      stderr.push(line);
      options.onLine?.(name, line);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(`${name} exited before listening (code ${code}, signal ${signal}): ${stderr.join('\n')}`),
      );
    });
  });
}

export async function startPlatform(options: StartOptions = {}): Promise<Platform> {
  const started: { name: ServiceName; child: ChildProcess; url: string }[] = [];
  const stop = async (graceMs = 15_000) => {
    await Promise.all(
      started.map(async ({ child }) => {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await waitForExit(child);
        clearTimeout(timer);
      }),
    );
  };
  try {
    for (const name of SERVICE_NAMES) {
      const port = options.ports?.[name] ?? DEFAULT_PORTS[name];
      // The router's embedded routing sends everything to the backend started just before it.
      const backend = started.find((s) => s.name === 'inference-backend')?.url;
      const serviceOptions =
        name === 'router-service' && backend
          ? { ...options, env: { STRATA_BACKEND_URL: backend, ...options.env } }
          : options;
      started.push({ name, ...(await startService(name, port, serviceOptions)) });
    }
  } catch (err) {
    await stop(2_000);
    throw err;
  }
  return {
    services: started.map(({ name, child, url }) => ({ name, url, pid: child.pid ?? -1 })),
    stop,
  };
}
