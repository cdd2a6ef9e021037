// The full local platform for load runs and fault tests: a private Redis, two CPU backends in one
// router pool, the router and the edge on that Redis, one observability sidecar per backend, and
// optionally a real Prometheus scraping all of them. Every process can be killed and restarted;
// exits nobody asked for are collected as crashes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { type NamedUrl, writePrometheusConfig, writeRoutesFile, writeTenantsFile } from './config-files.js';
import { ManagedService } from './managed.js';
import { modelDirWithChatTemplate } from './model-dir.js';
import { entryOf, fastModelDir, type ServiceName } from './platform.js';
import { answers200, freePort, waitUntil } from './ports.js';
import { PrometheusProcess } from './prometheus.js';
import { RedisProcess } from './redis.js';

export interface HarnessOptions {
  /** Start Prometheus too (default false: the fault tests do not need it). */
  prometheus?: boolean;
  /** Extra environment for both backends (e.g. STRATA_MAX_NUM_SEQS to set their capacity). */
  backendEnv?: NodeJS.ProcessEnv;
  routerEnv?: NodeJS.ProcessEnv;
  edgeEnv?: NodeJS.ProcessEnv;
  /** The edge tenant's quotas; default: far above what the backends serve. */
  tenantLimits?: { requestsPerMinute: number; tokensPerMinute: number };
  /** Where k6 and clients send traffic: the edge (default), or the router to leave the edge out. */
  entry?: 'edge' | 'router';
  onLine?: (label: string, line: string) => void;
}

export interface Harness {
  dir: string;
  /** The URL clients use: the edge, or the router when the edge is left out. */
  entryUrl: string;
  entry: 'edge' | 'router';
  apiKey: string;
  modelName: string;
  redis: RedisProcess;
  backends: ManagedService[];
  sidecars: ManagedService[];
  router: ManagedService;
  edge: ManagedService;
  prometheus: PrometheusProcess | undefined;
  /** Every unexpected exit so far, of any process. */
  crashes(): string[];
  /** Restarts a killed backend on its port and waits until the router routes to it again. */
  restartBackend(index: number): Promise<void>;
  /** Waits until the router reports every backend ready (its health probe runs every second). */
  waitRouterSeesAll(): Promise<void>;
  stop(): Promise<void>;
}

/** Bearer header for the edge (ignored by the router). */
export function authHeaders(apiKey: string): Record<string, string> {
  return { authorization: `Bearer ${apiKey}` };
}

async function routerReady(routerUrl: string, backend: string): Promise<boolean> {
  const text = await (await fetch(`${routerUrl}/metrics`, { signal: AbortSignal.timeout(2_000) })).text();
  return new RegExp(`^strata_router_backend_ready\\{[^}]*backend="${backend}"[^}]*\\} 1$`, 'm').test(text);
}

/** Starts services on 127.0.0.1, remembering how to stop each, last started first stopped. */
class Launcher {
  readonly stops: (() => Promise<unknown>)[] = [];
  constructor(private readonly onLine: (label: string, line: string) => void) {}

  async service(
    label: string,
    pkg: ServiceName,
    port: number,
    env: NodeJS.ProcessEnv,
  ): Promise<ManagedService> {
    const service = new ManagedService({
      label,
      entry: entryOf(pkg),
      host: '127.0.0.1',
      port,
      env,
      onLine: this.onLine,
    });
    await service.start();
    this.stops.push(() => service.stop());
    return service;
  }

  async stopAll(): Promise<void> {
    for (const stop of this.stops.reverse()) await stop().catch(() => {});
  }
}

/** The processes of the platform, started in dependency order: Redis, backends, router, edge, sidecars. */
async function startServices(
  launch: Launcher,
  dir: string,
  modelDir: string,
  modelName: string,
  options: HarnessOptions,
) {
  const redis = new RedisProcess(await freePort(), dir);
  await redis.start();
  launch.stops.push(() => redis.stop());
  // Two backends on two cores: one compute thread each. Fixed ports, so a restart keeps its URL.
  const backends = await Promise.all(
    [1, 2].map(async (i) =>
      launch.service(`backend-${i}`, 'inference-backend', await freePort(), {
        STRATA_MODEL_DIR: modelDir,
        STRATA_SERVED_MODEL_NAME: modelName,
        STRATA_ENGINE_THREADS: '1',
        ...options.backendEnv,
      }),
    ),
  );
  const pool: NamedUrl[] = backends.map((b) => ({ name: b.label, url: b.url }));
  const router = await launch.service('router', 'router-service', 0, {
    STRATA_ROUTES_FILE: writeRoutesFile(dir, pool),
    REDIS_URL: redis.url,
    ...options.routerEnv,
  });
  const { file: tenantsFile, tenant } = writeTenantsFile(
    dir,
    options.tenantLimits ?? { requestsPerMinute: 1_000_000, tokensPerMinute: 1_000_000_000 },
  );
  const edge = await launch.service('edge', 'edge-gateway', 0, {
    STRATA_ROUTER_URL: router.url,
    REDIS_URL: redis.url,
    STRATA_EDGE_TENANTS_FILE: tenantsFile,
    ...options.edgeEnv,
  });
  const sidecars = await Promise.all(
    backends.map((backend, i) =>
      launch.service(`sidecar-${i + 1}`, 'observability', 0, { STRATA_BACKEND_URL: backend.url }),
    ),
  );
  return { redis, backends, pool, router, edge, sidecars, apiKey: tenant.apiKey };
}

/** Until the backends are ready, the router routes to every one of them and the edge is ready. */
async function waitForTraffic(backends: ManagedService[], router: ManagedService, edge: ManagedService) {
  for (const b of backends)
    await waitUntil(`${b.label} ready`, () => answers200(`${b.url}/health/ready`), 120_000);
  const waitRouterSeesAll = () =>
    waitUntil('the router to see every backend ready', async () => {
      for (const b of backends) if (!(await routerReady(router.url, b.label))) return false;
      return true;
    });
  await waitRouterSeesAll();
  await waitUntil('edge ready', () => answers200(`${edge.url}/health/ready`));
  return waitRouterSeesAll;
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const sourceModel = fastModelDir();
  if (!sourceModel) throw new Error('no model: set STRATA_MODELS_DIR (tinystories-656k) or STRATA_MODEL_DIR');
  const dir = mkdtempSync(join(tmpdir(), 'strata-harness-'));
  const modelName = basename(sourceModel);
  const launch = new Launcher(options.onLine ?? (() => {}));
  const stop = async () => {
    await launch.stopAll();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const started = await startServices(
      launch,
      dir,
      modelDirWithChatTemplate(sourceModel, dir),
      modelName,
      options,
    );
    const { redis, backends, pool, router, edge, sidecars } = started;
    const waitRouterSeesAll = await waitForTraffic(backends, router, edge);
    let prometheus: PrometheusProcess | undefined;
    if (options.prometheus) {
      const config = writePrometheusConfig(dir, {
        'edge-gateway': [{ name: 'edge', url: edge.url }],
        'router-service': [{ name: 'router', url: router.url }],
        'inference-backend': pool,
        observability: sidecars.map((s) => ({ name: s.label, url: s.url })),
      });
      prometheus = new PrometheusProcess(config, join(dir, 'prometheus-data'));
      launch.stops.push(() => prometheus?.stop() ?? Promise.resolve());
      await prometheus.start();
    }
    const entry = options.entry ?? (process.env.STRATA_LOAD_ENTRY === 'router' ? 'router' : 'edge');
    return {
      dir,
      entry,
      entryUrl: entry === 'edge' ? edge.url : router.url,
      apiKey: started.apiKey,
      modelName,
      redis,
      backends,
      sidecars,
      router,
      edge,
      prometheus,
      crashes: () => [redis, ...backends, ...sidecars, router, edge].flatMap((p) => p.crashes),
      waitRouterSeesAll,
      restartBackend: async (index: number) => {
        const backend = backends[index];
        if (!backend) throw new Error(`no backend ${index}`);
        await backend.start();
        await waitUntil(`${backend.label} ready`, () => answers200(`${backend.url}/health/ready`), 120_000);
        await waitRouterSeesAll();
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
