// A stand-in for the Kubernetes API server, because no cluster can run where these tests run:
// a plain HTTP server on 127.0.0.1 that implements only the two calls the EndpointSlice watcher
// makes (list EndpointSlices by labelSelector, and the same path with ?watch=true streaming
// newline-delimited JSON events ADDED / MODIFIED / DELETED), plus a kubeconfig file pointing
// at it. Tests change slices through it and it sends the matching events to open watches.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface SliceEndpoint {
  ip: string;
  pod?: string;
  ready: boolean;
  serving?: boolean;
  terminating?: boolean;
}

export interface SliceSpec {
  name: string;
  service: string;
  ports: { name?: string; port: number }[];
  endpoints: SliceEndpoint[];
  addressType?: 'IPv4' | 'IPv6';
}

export interface ApiRequest {
  path: string;
  watch: boolean;
  labelSelector: string | null;
  resourceVersion: string | null;
}

interface Slice {
  apiVersion: 'discovery.k8s.io/v1';
  kind: 'EndpointSlice';
  metadata: { name: string; namespace: string; labels: Record<string, string>; resourceVersion: string };
  addressType: string;
  ports: { name?: string; port: number; protocol: 'TCP' }[];
  endpoints: {
    addresses: string[];
    conditions: { ready: boolean; serving: boolean; terminating: boolean };
    targetRef?: { kind: 'Pod'; name: string; namespace: string };
  }[];
}

const LABEL = 'kubernetes.io/service-name';

export class FakeApiServer {
  readonly requests: ApiRequest[] = [];
  private readonly server: Server;
  private readonly slices = new Map<string, Slice>();
  private readonly watches = new Set<{ res: ServerResponse; selector: string | null }>();
  private version = 100;
  /** The next this-many requests answer 500, as an API server in trouble would. */
  failNext = 0;
  private dir = '';
  url = '';
  kubeconfigPath = '';

  constructor(readonly namespace = 'strata') {
    this.server = createServer((req, res) => this.handle(req, res));
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    const { port } = this.server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}`;
    this.dir = mkdtempSync(join(tmpdir(), 'strata-kubeconfig-'));
    this.kubeconfigPath = join(this.dir, 'kubeconfig');
    // JSON is YAML, and KubeConfig.loadFromFile reads either.
    writeFileSync(
      this.kubeconfigPath,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        // Plain http: the client refuses it unless TLS verification is off.
        clusters: [{ name: 'fake', cluster: { server: this.url, 'insecure-skip-tls-verify': true } }],
        users: [{ name: 'router', user: { token: 'test-token' } }],
        contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'router', namespace: this.namespace } }],
        'current-context': 'fake',
      }),
    );
  }

  async close(): Promise<void> {
    this.dropWatches();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }

  /** Open watch connections right now. */
  openWatches(): number {
    return this.watches.size;
  }

  lists(): number {
    return this.requests.filter((r) => !r.watch).length;
  }

  /** Creates or replaces a slice; open watches get ADDED or MODIFIED. */
  put(spec: SliceSpec, { notify = true } = {}): void {
    const existed = this.slices.has(spec.name);
    const slice: Slice = {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: spec.name,
        namespace: this.namespace,
        labels: { [LABEL]: spec.service },
        resourceVersion: String(++this.version),
      },
      addressType: spec.addressType ?? 'IPv4',
      ports: spec.ports.map((p) => ({ ...p, protocol: 'TCP' })),
      endpoints: spec.endpoints.map((e) => ({
        addresses: [e.ip],
        conditions: { ready: e.ready, serving: e.serving ?? e.ready, terminating: e.terminating ?? false },
        ...(e.pod ? { targetRef: { kind: 'Pod' as const, name: e.pod, namespace: this.namespace } } : {}),
      })),
    };
    this.slices.set(spec.name, slice);
    if (notify) this.send(existed ? 'MODIFIED' : 'ADDED', slice);
  }

  /** Deletes a slice; open watches get DELETED. */
  delete(name: string): void {
    const slice = this.slices.get(name);
    if (!slice) throw new Error(`no slice ${name}`);
    this.slices.delete(name);
    slice.metadata.resourceVersion = String(++this.version);
    this.send('DELETED', slice);
  }

  /** Cuts every open watch connection, as a restarting API server or a broken network would. */
  dropWatches(): void {
    for (const { res } of this.watches) res.destroy();
    this.watches.clear();
  }

  private matches(slice: Slice, selector: string | null): boolean {
    if (selector === null) return true;
    const [key, value] = selector.split('=');
    return key !== undefined && slice.metadata.labels[key] === value;
  }

  private send(type: 'ADDED' | 'MODIFIED' | 'DELETED', slice: Slice): void {
    for (const { res, selector } of this.watches) {
      if (this.matches(slice, selector)) res.write(`${JSON.stringify({ type, object: slice })}\n`);
    }
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', this.url);
    const watch = url.searchParams.get('watch') === 'true';
    const labelSelector = url.searchParams.get('labelSelector');
    this.requests.push({
      path: url.pathname,
      watch,
      labelSelector,
      resourceVersion: url.searchParams.get('resourceVersion'),
    });
    if (this.failNext > 0) {
      this.failNext--;
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', status: 'Failure', code: 500 }));
      return;
    }
    const expected = `/apis/discovery.k8s.io/v1/namespaces/${this.namespace}/endpointslices`;
    if (
      req.method !== 'GET' ||
      url.pathname !== expected ||
      req.headers.authorization !== 'Bearer test-token'
    ) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', status: 'Failure', code: 404 }));
      return;
    }
    if (watch) {
      res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
      res.flushHeaders();
      const entry = { res, selector: labelSelector };
      this.watches.add(entry);
      res.on('close', () => this.watches.delete(entry));
      return;
    }
    const items = [...this.slices.values()].filter((s) => this.matches(s, labelSelector));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSliceList',
        metadata: { resourceVersion: String(this.version) },
        items,
      }),
    );
  }
}

/** Polls until check() holds, at most timeoutMs; throws with the last value otherwise. */
export async function waitFor(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (check()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}
