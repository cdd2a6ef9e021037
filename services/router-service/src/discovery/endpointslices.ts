// Discovers one pool's backends from the EndpointSlices of a Kubernetes Service: list the
// slices (label kubernetes.io/service-name=<service>), then watch them from the list's
// resourceVersion. Only endpoints whose conditions.ready is true count (a terminating pod that
// still serves is not ready). Every change hands the whole backend list to a callback. When the
// watch ends (error, dropped connection, server timeout, an ERROR event such as 410 Gone), it
// lists again after a backoff that grows with consecutive failures, so no event is lost.
import { DiscoveryV1Api, KubeConfig, type V1EndpointSlice, Watch } from '@kubernetes/client-node';
import type { Logger } from '@strata/common';
import type { PoolDiscovery } from '../routing/index.js';

export interface DiscoveredBackend {
  name: string;
  url: string;
}

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

/** Kubeconfig from the file when one is named (KUBECONFIG), else the pod's in-cluster config. */
export function loadKubeConfig(kubeconfigFile?: string): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfigFile) kc.loadFromFile(kubeconfigFile);
  else kc.loadFromCluster();
  return kc;
}

/** Code-point order, the same on every machine (localeCompare depends on the locale). */
const byCodePoint = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** The port of one slice's endpoints: the named port from the slice, or the number as is. */
function slicePort(slice: V1EndpointSlice, port: string | number): number | undefined {
  if (typeof port === 'number') return port;
  return (slice.ports ?? []).find((p) => p.name === port && (p.protocol ?? 'TCP') === 'TCP')?.port;
}

/**
 * The ready backends of a Service's slices, merged and sorted by name. Named after the pod
 * (targetRef) when there is one, else `ip:port`; a pod listed twice keeps its first entry.
 */
export function backendsFromSlices(
  slices: Iterable<V1EndpointSlice>,
  port: string | number,
): DiscoveredBackend[] {
  const byName = new Map<string, DiscoveredBackend>();
  const ordered = [...slices].sort((a, b) => byCodePoint(a.metadata?.name ?? '', b.metadata?.name ?? ''));
  for (const slice of ordered) {
    if (slice.addressType === 'FQDN') continue;
    const p = slicePort(slice, port);
    if (p === undefined) continue;
    for (const endpoint of slice.endpoints ?? []) {
      if (endpoint.conditions?.ready !== true) continue;
      const ip = endpoint.addresses[0];
      if (!ip) continue;
      const address = hostPort(ip, p);
      const pod = endpoint.targetRef?.kind === 'Pod' ? endpoint.targetRef.name : undefined;
      const name = pod ?? address;
      if (!byName.has(name)) byName.set(name, { name, url: `http://${address}` });
    }
  }
  return [...byName.values()].sort((a, b) => byCodePoint(a.name, b.name));
}

const STABLE_WATCH_MS = 10_000;

export interface EndpointSliceWatcherOptions {
  kubeConfig: KubeConfig;
  discovery: PoolDiscovery;
  /** Called with the pool's full backend list after the first list and after every change. */
  onChange: (backends: DiscoveredBackend[]) => void;
  logger: Logger;
  /** First delay before listing again after a failure; doubles per consecutive failure. */
  backoffMs?: number;
  maxBackoffMs?: number;
}

interface WatchEvent {
  type?: unknown;
  object?: unknown;
}

export class EndpointSliceWatcher {
  private readonly api: DiscoveryV1Api;
  private readonly watch: Watch;
  private readonly path: string;
  private readonly labelSelector: string;
  private readonly slices = new Map<string, V1EndpointSlice>();
  private readonly backoffMs: number;
  private readonly maxBackoffMs: number;
  private lastKey = '';
  private watchStartedAt = 0;
  private failures = 0;
  private generation = 0;
  private stopped = false;
  private request: AbortController | undefined;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(private readonly options: EndpointSliceWatcherOptions) {
    const { namespace, service } = options.discovery;
    this.api = options.kubeConfig.makeApiClient(DiscoveryV1Api);
    this.watch = new Watch(options.kubeConfig);
    this.path = `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices`;
    this.labelSelector = `${SERVICE_NAME_LABEL}=${service}`;
    this.backoffMs = options.backoffMs ?? 500;
    this.maxBackoffMs = options.maxBackoffMs ?? 30_000;
  }

  /** Starts listing and watching in the background; errors are logged and retried. */
  start(): void {
    if (this.stopped) throw new Error('EndpointSliceWatcher was stopped');
    void this.listAndWatch();
  }

  /** Stops the watch and any pending retry; no callback runs afterwards. */
  stop(): void {
    this.stopped = true;
    this.generation++;
    clearTimeout(this.retryTimer);
    this.request?.abort();
    this.request = undefined;
  }

  /** The backends as last reported. */
  current(): DiscoveredBackend[] {
    return backendsFromSlices(this.slices.values(), this.options.discovery.port);
  }

  private emit(): void {
    const backends = this.current();
    const key = JSON.stringify(backends);
    if (key === this.lastKey) return;
    this.lastKey = key;
    this.options.onChange(backends);
  }

  private async listAndWatch(): Promise<void> {
    const generation = ++this.generation;
    const { namespace } = this.options.discovery;
    try {
      const list = await this.api.listNamespacedEndpointSlice({
        namespace,
        labelSelector: this.labelSelector,
      });
      if (generation !== this.generation) return;
      this.slices.clear();
      for (const slice of list.items) this.slices.set(slice.metadata?.name ?? '', slice);
      this.emit();
      this.watchStartedAt = Date.now();
      const request = await this.watch.watch(
        this.path,
        {
          labelSelector: this.labelSelector,
          resourceVersion: list.metadata?.resourceVersion,
          allowWatchBookmarks: true,
        },
        (type: string, object: unknown) => {
          if (generation === this.generation) this.onEvent(generation, { type, object });
        },
        (err: unknown) => {
          if (generation === this.generation) this.retry(generation, err);
        },
      );
      if (generation !== this.generation) request.abort();
      else this.request = request;
    } catch (err) {
      if (generation === this.generation) this.retry(generation, err);
    }
  }

  private onEvent(generation: number, event: WatchEvent): void {
    const slice = event.object as V1EndpointSlice | undefined;
    const name = slice?.metadata?.name;
    switch (event.type) {
      case 'ADDED':
      case 'MODIFIED':
        if (slice && name !== undefined) this.slices.set(name, slice);
        break;
      case 'DELETED':
        if (name !== undefined) this.slices.delete(name);
        break;
      case 'ERROR':
        // e.g. 410 Gone: the resourceVersion is too old; list again.
        this.retry(generation, new Error(`watch error event: ${JSON.stringify(event.object)}`));
        return;
      default:
        return; // BOOKMARK
    }
    this.failures = 0;
    this.emit();
  }

  private retry(generation: number, err: unknown): void {
    if (this.stopped || generation !== this.generation) return;
    this.generation++; // ignore anything the old watch still delivers
    this.request?.abort();
    this.request = undefined;
    const { namespace, service } = this.options.discovery;
    // A watch the client closes for inactivity is normal on a quiet Service: no backoff.
    const quiet = (err as { name?: unknown } | null)?.name === 'TimeoutError';
    // A watch that lasted a while was a success: start the backoff over.
    if (this.watchStartedAt > 0 && Date.now() - this.watchStartedAt >= STABLE_WATCH_MS) this.failures = 0;
    this.watchStartedAt = 0;
    const delay = quiet ? 0 : Math.min(this.backoffMs * 2 ** this.failures, this.maxBackoffMs);
    if (!quiet) this.failures++;
    const reason = err instanceof Error ? err.message : err ? String(err) : 'watch closed';
    this.options.logger[err && !quiet ? 'warn' : 'info'](
      { namespace, service, err: reason, retryInMs: delay },
      'endpointslice watch ended: listing again',
    );
    this.retryTimer = setTimeout(() => {
      if (!this.stopped) void this.listAndWatch();
    }, delay);
  }
}
