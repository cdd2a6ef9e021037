// Builds the router's moving parts from its configuration: the routing file (hot-reloaded, or
// an embedded one-backend default), Kubernetes discovery for pools that name a Service, the
// backend tracker over every pool's static and discovered backends, and session affinity in
// Redis or in memory.
import type { Logger, Registry } from '@strata/common';
import {
  AffinityService,
  MemorySessionStore,
  RedisSessionStore,
  type SessionStore,
} from './affinity/index.js';
import type { Config } from './config.js';
import { type DiscoveredBackend, DiscoveredPools, type WatcherFactory } from './discovery/index.js';
import { BackendTracker } from './health/index.js';
import type { RouterDeps } from './router.js';
import { parseRoutingConfig, type RoutingConfig, watchRoutingFile } from './routing/index.js';

export interface RouterParts {
  deps: Omit<RouterDeps, 'metrics'>;
  close(): Promise<void>;
}

/** Every pool's static backends, then discovered ones whose name no static backend has. */
export function allBackends(
  routing: RoutingConfig,
  discovered: readonly DiscoveredBackend[] = [],
): { name: string; url: string }[] {
  const seen = new Map<string, string>();
  for (const { backends } of Object.values(routing.pools)) for (const b of backends) seen.set(b.name, b.url);
  for (const b of discovered) if (!seen.has(b.name)) seen.set(b.name, b.url);
  return [...seen].map(([name, url]) => ({ name, url }));
}

function embeddedRouting(backendUrl: string): RoutingConfig {
  return parseRoutingConfig(
    { pools: { local: { backends: [{ name: 'local', url: backendUrl }] } }, default: { pool: 'local' } },
    'embedded default routing',
  );
}

export async function buildRouterParts(
  config: Config,
  logger: Logger,
  registry: Registry,
  /** Tests replace how Kubernetes discovery watchers are made. */
  createWatcher?: WatcherFactory,
): Promise<RouterParts> {
  let tracker: BackendTracker | undefined;
  const discovery = new DiscoveredPools({
    logger,
    onChange: () => tracker?.setBackends(allBackends(routing(), discovery.backends())),
    ...(config.kubeconfig ? { kubeconfigFile: config.kubeconfig } : {}),
    ...(createWatcher ? { createWatcher } : {}),
  });
  const file = config.routesFile;
  const watcher = file
    ? watchRoutingFile(file, {
        onReload: (next) => {
          logger.info({ file, rules: next.rules.map((r) => r.name) }, 'routing file reloaded');
          discovery.sync(next);
          tracker?.setBackends(allBackends(next, discovery.backends()));
        },
        onError: (err) =>
          logger.error({ file, err: err.message }, 'routing file rejected: keeping the last good one'),
      })
    : undefined;
  const embedded = watcher ? undefined : embeddedRouting(config.backendUrl);
  const routing = () => watcher?.current() ?? (embedded as RoutingConfig);
  discovery.sync(routing());
  tracker = new BackendTracker({
    backends: allBackends(routing(), discovery.backends()),
    registry,
    logger,
    probeIntervalMs: config.health.probeIntervalMs,
    loadIntervalMs: config.health.loadIntervalMs,
  });

  let store: SessionStore;
  if (config.redisUrl) {
    const redis = new RedisSessionStore({ url: config.redisUrl });
    await redis
      .waitReady()
      .catch((err: Error) =>
        logger.warn(
          { err: err.message },
          'redis not reachable yet: routing without session affinity until it is',
        ),
      );
    store = redis;
  } else {
    store = new MemorySessionStore();
  }
  const affinity = new AffinityService({ store, registry, logger, ttlMs: config.sessionTtlMs });
  tracker.start();
  const running = tracker;
  return {
    deps: {
      routing,
      tracker: running,
      affinity,
      retry: config.retry,
      identity: config.identity,
      loadMaxAgeMs: config.health.loadMaxAgeMs,
      discovered: (pool) => discovery.members(pool),
    },
    close: async () => {
      watcher?.close();
      discovery.stop();
      await running.stop();
      await store.close();
    },
  };
}
