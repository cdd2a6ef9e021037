// Starts the whole local platform as child processes on their embedded defaults and reports
// where each service listens. Used by `scripts/strata up`, and by tests and load runs.
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type SpawnedService, spawnService, stopChild } from '@strata/common';

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
  /** A service exited that stop() did not stop. */
  onExit?: (service: ServiceName, code: number | null, signal: NodeJS.Signals | null) => void;
  startTimeoutMs?: number;
}

const require = createRequire(import.meta.url);

export function entryOf(name: ServiceName): string {
  return join(dirname(require.resolve(`@strata/${name}`)), 'main.js');
}

/** The model the local platform serves by default: SmolLM2-135M-Instruct, Q4_1 GGUF. */
export const DEFAULT_MODEL_FILE = 'SmolLM2-135M-Instruct.Q4_1.gguf';
/** The small test model served when the default model was not fetched. */
export const FALLBACK_MODEL = 'tinystories-656k';

/**
 * The backend's model: STRATA_MODEL_DIR; else the default model that `scripts/strata setup`
 * fetched into .toolchain/models (STRATA_SMOLLM2_GGUF names it too); else the fast model
 * (fastModelDir); undefined when none exists (the backend then runs, not ready, and says so).
 */
export function defaultModelDir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.STRATA_MODEL_DIR) return env.STRATA_MODEL_DIR;
  const fetched = [env.STRATA_SMOLLM2_GGUF, join(repoRoot, '.toolchain', 'models', DEFAULT_MODEL_FILE)].find(
    (file): file is string => file !== undefined && file !== '' && existsSync(file),
  );
  return fetched ?? fastModelDir(env);
}

/**
 * The small model load tests run on: STRATA_MODEL_DIR, else FALLBACK_MODEL in STRATA_MODELS_DIR
 * or in ../shared/models beside the repository; undefined when none exists.
 */
export function fastModelDir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.STRATA_MODEL_DIR) return env.STRATA_MODEL_DIR;
  const candidates = [env.STRATA_MODELS_DIR, join(repoRoot, '..', 'shared', 'models')].filter(
    (dir): dir is string => dir !== undefined && dir !== '',
  );
  return candidates
    .map((dir) => join(dir, FALLBACK_MODEL))
    .find((dir) => existsSync(join(dir, 'config.json')));
}

/** The repository checkout this package runs from. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

function startService(name: ServiceName, port: number, options: StartOptions): Promise<SpawnedService> {
  const model =
    name === 'inference-backend' ? defaultModelDir({ ...process.env, ...options.env }) : undefined;
  return spawnService({
    label: name,
    entry: entryOf(name),
    host: options.host ?? '127.0.0.1',
    port,
    env: { ...(model ? { STRATA_MODEL_DIR: model } : {}), ...options.env },
    onLine: (_label, line) => options.onLine?.(name, line),
    lifeline: true,
    ...(options.startTimeoutMs !== undefined ? { startTimeoutMs: options.startTimeoutMs } : {}),
  });
}

export async function startPlatform(options: StartOptions = {}): Promise<Platform> {
  const started: { name: ServiceName; child: ChildProcess; url: string }[] = [];
  let stopping = false;
  const stop = async (graceMs = 15_000) => {
    stopping = true;
    await Promise.all(started.map(({ child }) => stopChild(child, graceMs)));
  };
  try {
    for (const name of SERVICE_NAMES) {
      const port = options.ports?.[name] ?? DEFAULT_PORTS[name];
      // Each service is pointed at the one it talks to, started before it (any port, 0 too):
      // router -> backend, edge -> router, sidecar -> backend.
      const url = (of: ServiceName) => started.find((s) => s.name === of)?.url;
      const upstream: Partial<Record<ServiceName, [string, string | undefined]>> = {
        'router-service': ['STRATA_BACKEND_URL', url('inference-backend')],
        'edge-gateway': ['STRATA_ROUTER_URL', url('router-service')],
        observability: ['STRATA_BACKEND_URL', url('inference-backend')],
      };
      const [variable, target] = upstream[name] ?? [];
      const serviceOptions =
        variable && target ? { ...options, env: { [variable]: target, ...options.env } } : options;
      const service = await startService(name, port, serviceOptions);
      service.child.once('exit', (code, signal) => {
        if (!stopping) options.onExit?.(name, code, signal);
      });
      started.push({ name, ...service });
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
