// Builds the router's moving parts from its configuration: the routing file (hot-reloaded, or
// an embedded one-backend default), the backend tracker over every pool's backends, and session
// affinity in Redis or in memory.
import type { Logger, Registry } from '@strata/common';
import {
  AffinityService,
  MemorySessionStore,
  RedisSessionStore,
  type SessionStore,
} from './affinity/index.js';
import type { Config } from './config.js';
import { BackendTracker } from './health/index.js';
import type { RouterDeps } from './router.js';
import { parseRoutingConfig, type RoutingConfig, watchRoutingFile } from './routing/index.js';

export interface RouterParts {
  deps: Omit<RouterDeps, 'metrics'>;
  close(): Promise<void>;
}

function allBackends(routing: RoutingConfig): { name: string; url: string }[] {
  const seen = new Map<string, string>();
  for (const { backends } of Object.values(routing.pools)) for (const b of backends) seen.set(b.name, b.url);
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
): Promise<RouterParts> {
  let tracker: BackendTracker | undefined;
  const file = config.routesFile;
  const watcher = file
    ? watchRoutingFile(file, {
        onReload: (next) => {
          logger.info({ file, rules: next.rules.map((r) => r.name) }, 'routing file reloaded');
          tracker?.setBackends(allBackends(next));
        },
        onError: (err) =>
          logger.error({ file, err: err.message }, 'routing file rejected: keeping the last good one'),
      })
    : undefined;
  const embedded = watcher ? undefined : embeddedRouting(config.backendUrl);
  const routing = () => watcher?.current() ?? (embedded as RoutingConfig);
  tracker = new BackendTracker({ backends: allBackends(routing()), registry, logger, ...config.health });

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
    deps: { routing, tracker: running, affinity, retry: config.retry },
    close: async () => {
      watcher?.close();
      await running.stop();
      await store.close();
    },
  };
}
