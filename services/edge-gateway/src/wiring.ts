// Builds the edge's moving parts from its configuration: the tenants file (hot-reloaded; a bad
// change keeps the last good keys), the quota store (Redis shared by replicas, else memory), and
// the connection pool to the router.
import { type ConfigFileWatcher, type Logger, type Registry, watchConfigFile } from '@strata/common';
import { Pool } from 'undici';
import type { EdgeParts } from './app.js';
import { parseTenantsYaml, type TenantKey } from './auth/tenants.js';
import type { Config } from './config.js';
import type { QuotaStore } from './quota/bucket.js';
import { MemoryQuotaStore } from './quota/memory-store.js';
import { Quotas } from './quota/quotas.js';
import { RedisQuotaStore } from './quota/redis-store.js';

export interface EdgeWiring {
  parts: EdgeParts;
  close(): Promise<void>;
}

export async function buildEdgeParts(
  config: Config,
  logger: Logger,
  registry: Registry,
): Promise<EdgeWiring> {
  let tenants: ConfigFileWatcher<TenantKey[]> | undefined;
  if (config.tenantsFile) {
    const file = config.tenantsFile;
    tenants = watchConfigFile(file, parseTenantsYaml, {
      onReload: (keys) =>
        logger.info({ file, tenants: new Set(keys.map((k) => k.tenant.name)).size }, 'tenants file reloaded'),
      onError: (err) =>
        logger.error({ file, err: err.message }, 'tenants file rejected: keeping the last good one'),
    });
    logger.info(
      { file, tenants: new Set(tenants.current().map((k) => k.tenant.name)).size },
      'API keys required',
    );
  } else {
    logger.warn(
      'no tenants file (STRATA_EDGE_TENANTS_FILE): auth is OFF, every request is tenant "anonymous"',
    );
  }

  let store: QuotaStore;
  if (config.quota.redisUrl) {
    const redis = new RedisQuotaStore({ url: config.quota.redisUrl });
    await redis
      .waitReady()
      .catch((err: Error) =>
        logger.warn(
          { err: err.message, fail_mode: config.quota.failMode },
          'redis not reachable yet for quotas',
        ),
      );
    store = redis;
  } else {
    store = new MemoryQuotaStore();
  }
  const quotas = new Quotas({
    store,
    defaults: {
      requestsPerMinute: config.quota.requestsPerMinute,
      tokensPerMinute: config.quota.tokensPerMinute,
    },
    failMode: config.quota.failMode,
    registry,
    logger,
  });
  const router = new Pool(config.routerUrl, {
    connections: config.upstream.connections,
    headersTimeout: config.upstream.headersTimeoutMs,
    bodyTimeout: 0, // streams idle between tokens; the backend sends heartbeats
  });
  const watcher = tenants;
  const identityKey = config.identity.keys[0];
  if (identityKey) {
    logger.info({ key_id: identityKey.id }, 'forwarded requests carry a signed identity');
  } else {
    logger.warn(
      'no identity keys (STRATA_IDENTITY_KEYS): requests are forwarded unsigned; routers and backends serve them as tenant "unverified"',
    );
  }
  return {
    parts: { router, keys: () => watcher?.current(), quotas, identityKey },
    close: async () => {
      watcher?.close();
      await router.close();
      await quotas.close();
    },
  };
}
