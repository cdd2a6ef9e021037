// EndpointSlice discovery against a fake API server. No Kubernetes cluster can run where these
// tests run, so test/discovery/fake-apiserver.ts stands in for the API server: it implements
// just the list and watch calls the watcher makes, and @kubernetes/client-node talks to it
// through a kubeconfig file in a temp dir, exactly as it would talk to a real cluster.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  backendsFromSlices,
  type DiscoveredBackend,
  EndpointSliceWatcher,
  loadKubeConfig,
} from '../../src/discovery/index.js';
import { captureLogger } from '../support/log.js';
import { FakeApiServer, type SliceSpec, waitFor } from './fake-apiserver.js';

const SERVICE = 'strata-backend-main';
const PORTS = [
  { name: 'metrics', port: 9090 },
  { name: 'http', port: 8000 },
];

function slice(name: string, endpoints: SliceSpec['endpoints'], ports = PORTS): SliceSpec {
  return { name, service: SERVICE, ports, endpoints };
}

describe('backendsFromSlices', () => {
  const asSlice = (spec: Partial<SliceSpec> & { name: string }) => ({
    metadata: { name: spec.name },
    addressType: spec.addressType ?? 'IPv4',
    ports: (spec.ports ?? PORTS).map((p) => ({ ...p, protocol: 'TCP' })),
    endpoints: (spec.endpoints ?? []).map((e) => ({
      addresses: [e.ip],
      conditions: { ready: e.ready },
      ...(e.pod ? { targetRef: { kind: 'Pod', name: e.pod } } : {}),
    })),
  });

  it('keeps ready endpoints, resolves the named port per slice and names by pod or ip:port', () => {
    const backends = backendsFromSlices(
      [
        asSlice({
          name: 'b',
          ports: [{ name: 'http', port: 8001 }],
          endpoints: [
            { ip: '10.0.0.9', ready: true },
            { ip: '10.0.0.8', pod: 'pod-x', ready: false },
          ],
        }),
        asSlice({ name: 'a', endpoints: [{ ip: '10.0.0.1', pod: 'pod-a', ready: true }] }),
        asSlice({ name: 'v6', addressType: 'IPv6', endpoints: [{ ip: 'fd00::1', ready: true }] }),
        asSlice({
          name: 'noport',
          ports: [{ name: 'grpc', port: 9000 }],
          endpoints: [{ ip: '10.0.0.7', ready: true }],
        }),
      ],
      'http',
    );
    expect(backends).toEqual([
      { name: '10.0.0.9:8001', url: 'http://10.0.0.9:8001' },
      { name: '[fd00::1]:8000', url: 'http://[fd00::1]:8000' },
      { name: 'pod-a', url: 'http://10.0.0.1:8000' },
    ]);
  });

  it('uses a port number as is', () => {
    const backends = backendsFromSlices(
      [asSlice({ name: 'a', endpoints: [{ ip: '10.0.0.1', pod: 'pod-a', ready: true }] })],
      7000,
    );
    expect(backends).toEqual([{ name: 'pod-a', url: 'http://10.0.0.1:7000' }]);
  });
});

describe('EndpointSliceWatcher against a fake API server', () => {
  let api: FakeApiServer;
  let watcher: EndpointSliceWatcher | undefined;
  let updates: DiscoveredBackend[][];
  const captured = captureLogger();

  const latest = () => updates.at(-1);
  const names = () => (latest() ?? []).map((b) => b.name);

  function startWatcher(port: string | number = 'http'): EndpointSliceWatcher {
    const w = new EndpointSliceWatcher({
      kubeConfig: loadKubeConfig(api.kubeconfigPath),
      discovery: { service: SERVICE, namespace: 'strata', port },
      onChange: (backends) => updates.push(backends),
      logger: captured.logger,
      backoffMs: 20,
      maxBackoffMs: 100,
    });
    w.start();
    watcher = w;
    return w;
  }

  beforeEach(async () => {
    updates = [];
    captured.lines.length = 0;
    api = new FakeApiServer('strata');
    await api.start();
  });

  afterEach(async () => {
    watcher?.stop();
    watcher = undefined;
    await api.close();
  });

  it('lists by the service label and reports only ready endpoints on the named port', async () => {
    api.put(
      slice('main-1', [
        { ip: '10.0.0.1', pod: 'pod-a', ready: true },
        { ip: '10.0.0.2', pod: 'pod-b', ready: false },
        // Still serving while it drains, but terminating: not ready, never routed to.
        { ip: '10.0.0.3', pod: 'pod-c', ready: false, serving: true, terminating: true },
      ]),
    );
    api.put({
      name: 'other-1',
      service: 'other',
      ports: PORTS,
      endpoints: [{ ip: '10.9.9.9', pod: 'x', ready: true }],
    });
    startWatcher();
    await waitFor(() => api.openWatches() === 1, 'the watch to open');
    expect(updates).toEqual([[{ name: 'pod-a', url: 'http://10.0.0.1:8000' }]]);
    const [list, watch] = api.requests;
    expect(list).toMatchObject({ watch: false, labelSelector: `kubernetes.io/service-name=${SERVICE}` });
    expect(watch).toMatchObject({
      path: '/apis/discovery.k8s.io/v1/namespaces/strata/endpointslices',
      watch: true,
      labelSelector: `kubernetes.io/service-name=${SERVICE}`,
      resourceVersion: '102',
    });
  });

  it('follows updates: readiness changes, new pods, a second slice, a deleted slice', async () => {
    api.put(slice('main-1', [{ ip: '10.0.0.1', pod: 'pod-a', ready: true }]));
    startWatcher();
    await waitFor(() => api.openWatches() === 1, 'the watch to open');
    expect(names()).toEqual(['pod-a']);

    api.put(
      slice('main-1', [
        { ip: '10.0.0.1', pod: 'pod-a', ready: true },
        { ip: '10.0.0.2', pod: 'pod-b', ready: true },
      ]),
    );
    await waitFor(() => names().length === 2, 'pod-b to be added');
    expect(latest()).toEqual([
      { name: 'pod-a', url: 'http://10.0.0.1:8000' },
      { name: 'pod-b', url: 'http://10.0.0.2:8000' },
    ]);

    // A second slice of the same Service, whose named port maps to another number.
    api.put(slice('main-2', [{ ip: '10.0.1.1', pod: 'pod-d', ready: true }], [{ name: 'http', port: 8001 }]));
    await waitFor(() => names().length === 3, 'the second slice to merge');
    expect(latest()).toContainEqual({ name: 'pod-d', url: 'http://10.0.1.1:8001' });

    api.put(
      slice('main-1', [
        { ip: '10.0.0.1', pod: 'pod-a', ready: false, serving: true, terminating: true },
        { ip: '10.0.0.2', pod: 'pod-b', ready: true },
      ]),
    );
    await waitFor(() => !names().includes('pod-a'), 'pod-a to be removed');
    expect(names()).toEqual(['pod-b', 'pod-d']);

    api.delete('main-2');
    await waitFor(() => names().length === 1, 'the deleted slice to be removed');
    expect(names()).toEqual(['pod-b']);
    expect(updates.map((u) => u.map((b) => b.name))).toEqual([
      ['pod-a'],
      ['pod-a', 'pod-b'],
      ['pod-a', 'pod-b', 'pod-d'],
      ['pod-b', 'pod-d'],
      ['pod-b'],
    ]);
  });

  it('lists again and carries on when the watch connection drops', async () => {
    api.put(slice('main-1', [{ ip: '10.0.0.1', pod: 'pod-a', ready: true }]));
    startWatcher();
    await waitFor(() => api.openWatches() === 1, 'the watch to open');
    // Changes made while no watch is open reach the router only through the new list.
    api.dropWatches();
    api.put(slice('main-1', [{ ip: '10.0.0.2', pod: 'pod-b', ready: true }]), { notify: false });
    await waitFor(() => api.lists() === 2 && api.openWatches() === 1, 'a new list and watch');
    expect(latest()).toEqual([{ name: 'pod-b', url: 'http://10.0.0.2:8000' }]);

    api.put(slice('main-2', [{ ip: '10.0.1.1', pod: 'pod-c', ready: true }]));
    await waitFor(() => names().length === 2, 'events on the new watch');
    expect(names()).toEqual(['pod-b', 'pod-c']);
    expect(captured.lines.some((l) => l.msg === 'endpointslice watch ended: listing again')).toBe(true);
  });

  it('retries with backoff while the API server fails, then recovers', async () => {
    api.put(slice('main-1', [{ ip: '10.0.0.1', pod: 'pod-a', ready: true }]));
    api.failNext = 2;
    startWatcher();
    await waitFor(() => api.openWatches() === 1, 'the watch to open after failures');
    expect(api.lists()).toBe(3);
    expect(names()).toEqual(['pod-a']);
    const warnings = captured.lines.filter((l) => l.msg === 'endpointslice watch ended: listing again');
    expect(warnings.map((l) => l.retryInMs)).toEqual([20, 40]);
  });

  it('stops cleanly: the watch closes and no callback runs afterwards', async () => {
    api.put(slice('main-1', [{ ip: '10.0.0.1', pod: 'pod-a', ready: true }]));
    const w = startWatcher();
    await waitFor(() => api.openWatches() === 1, 'the watch to open');
    w.stop();
    await waitFor(() => api.openWatches() === 0, 'the watch to close');
    api.put(slice('main-1', [{ ip: '10.0.0.2', pod: 'pod-b', ready: true }]));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(updates).toEqual([[{ name: 'pod-a', url: 'http://10.0.0.1:8000' }]]);
    expect(api.lists()).toBe(1);
  });
});
