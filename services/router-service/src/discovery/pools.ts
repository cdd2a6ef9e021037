// One discovery watcher per pool that names a Kubernetes Service, kept in step with the routing
// file across reloads (a pool whose discovery changed gets a new watcher; a removed one is
// stopped). It answers which backends each pool has discovered and tells its owner on change.
import type { Logger } from '@strata/common';
import type { PoolDiscovery, RoutingConfig } from '../routing/index.js';
import { type DiscoveredBackend, EndpointSliceWatcher, loadKubeConfig } from './endpointslices.js';

export interface DiscoveryWatcher {
  start(): void;
  stop(): void;
}

export type WatcherFactory = (
  discovery: PoolDiscovery,
  onChange: (backends: DiscoveredBackend[]) => void,
) => DiscoveryWatcher;

export interface DiscoveredPoolsOptions {
  logger: Logger;
  /** Called after any pool's discovered backends change. */
  onChange: () => void;
  /** Kubeconfig file (KUBECONFIG); absent: the pod's in-cluster config. */
  kubeconfigFile?: string;
  /** Tests replace how watchers are made. */
  createWatcher?: WatcherFactory;
}

interface PoolEntry {
  key: string;
  watcher: DiscoveryWatcher;
  backends: DiscoveredBackend[];
}

export class DiscoveredPools {
  private readonly pools = new Map<string, PoolEntry>();
  private readonly createWatcher: WatcherFactory;

  constructor(private readonly options: DiscoveredPoolsOptions) {
    this.createWatcher = options.createWatcher ?? this.kubernetesWatcher();
  }

  private kubernetesWatcher(): WatcherFactory {
    const { logger, kubeconfigFile } = this.options;
    let kubeConfig: ReturnType<typeof loadKubeConfig> | undefined;
    return (discovery, onChange) => {
      kubeConfig ??= loadKubeConfig(kubeconfigFile);
      return new EndpointSliceWatcher({ kubeConfig, discovery, onChange, logger });
    };
  }

  /** Starts, restarts or stops watchers so that they match the routing file's pools. */
  sync(routing: RoutingConfig): void {
    const wanted = new Map<string, PoolDiscovery>();
    for (const [pool, { discovery }] of Object.entries(routing.pools))
      if (discovery) wanted.set(pool, discovery);
    let changed = false;
    for (const [pool, entry] of this.pools) {
      const next = wanted.get(pool);
      if (next && JSON.stringify(next) === entry.key) continue;
      entry.watcher.stop();
      this.pools.delete(pool);
      changed ||= entry.backends.length > 0;
    }
    for (const [pool, discovery] of wanted) {
      if (this.pools.has(pool)) continue;
      const entry: PoolEntry = {
        key: JSON.stringify(discovery),
        watcher: { start() {}, stop() {} },
        backends: [],
      };
      try {
        entry.watcher = this.createWatcher(discovery, (backends) => {
          if (this.pools.get(pool) !== entry) return;
          entry.backends = backends;
          this.options.logger.info(
            { pool, ...discovery, backends: backends.map((b) => b.name) },
            'discovered backends changed',
          );
          this.options.onChange();
        });
        entry.watcher.start();
      } catch (err) {
        this.options.logger.error(
          { pool, ...discovery, err: (err as Error).message },
          'cannot start Kubernetes discovery: the pool has only its static backends',
        );
      }
      this.pools.set(pool, entry);
    }
    if (changed) this.options.onChange();
  }

  /** The names of a pool's discovered backends. */
  members(pool: string): string[] {
    return (this.pools.get(pool)?.backends ?? []).map((b) => b.name);
  }

  /** Every pool's discovered backends, one entry per name. */
  backends(): DiscoveredBackend[] {
    const seen = new Map<string, DiscoveredBackend>();
    for (const { backends } of this.pools.values())
      for (const b of backends) if (!seen.has(b.name)) seen.set(b.name, b);
    return [...seen.values()];
  }

  stop(): void {
    for (const { watcher } of this.pools.values()) watcher.stop();
    this.pools.clear();
  }
}
