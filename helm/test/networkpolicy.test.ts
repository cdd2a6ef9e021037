// The NetworkPolicies allow exactly the data path client -> Envoy -> edge -> router -> backend,
// Redis from edge and router only, Prometheus to metrics ports only, and nothing else.
import { describe, expect, it } from 'vitest';
import { ofKind, parseManifests } from './support/manifests.js';
import { allowedEdges, type Pod, releasePods } from './support/network.js';
import { gpuOperatorValues, productionValues, template } from './support/tools.js';

const prometheus: Pod = {
  name: 'prometheus',
  namespace: 'monitoring',
  namespaceLabels: { 'kubernetes.io/metadata.name': 'monitoring' },
  labels: { 'app.kubernetes.io/name': 'prometheus' },
  ports: [],
};
// Anything else in the cluster (or the internet through the load balancer).
const stranger: Pod = {
  name: 'stranger',
  namespace: 'other',
  namespaceLabels: { 'kubernetes.io/metadata.name': 'other' },
  labels: { app: 'curl' },
  ports: [],
};
// A pod in the release's own namespace carrying a Strata-looking but unrelated label set.
const neighbour: Pod = {
  ...stranger,
  name: 'neighbour',
  namespace: 'strata',
  namespaceLabels: { 'kubernetes.io/metadata.name': 'strata' },
};

function edgesFor(values: string[]) {
  const docs = parseManifests(template({ values }));
  const pods = [...releasePods(docs, 'strata'), prometheus, stranger, neighbour];
  return { edges: allowedEdges(ofKind(docs, 'NetworkPolicy'), pods), docs };
}

describe('NetworkPolicies', () => {
  it('default values: the chain, Redis from edge/router, metrics to Prometheus, the public listener, and no more', () => {
    const { edges } = edgesFor([]);
    expect(edges).toEqual(
      [
        'edge -> redis:6379',
        'edge -> router:8081',
        'envoy -> edge:8080',
        'router -> backend[llama-3-8b]:8000',
        'router -> redis:6379',
        // The sidecar reads its node's dcgm-exporter.
        'backend[llama-3-8b] -> dcgm-exporter:9400',
        'prometheus -> dcgm-exporter:9400',
        'prometheus -> backend[llama-3-8b]:8000',
        'prometheus -> backend[llama-3-8b]:9400',
        'prometheus -> edge:9091',
        'prometheus -> envoy:9902',
        'prometheus -> router:8081',
        // The public listener is open to anyone, Prometheus included.
        'prometheus -> envoy:8080',
        'stranger -> envoy:8080',
        'neighbour -> envoy:8080',
        'warmup[llama-3-8b] -> envoy:8080',
      ].sort(),
    );
  });

  it('production values: two models, TLS listener, external Redis, the same chain', () => {
    const { edges } = edgesFor([productionValues]);
    const models = ['llama-3-8b', 'mistral-7b'];
    expect(edges).toEqual(
      [
        'edge -> router:8081',
        'envoy -> edge:8080',
        ...models.map((m) => `router -> backend[${m}]:8000`),
        ...models.map((m) => `backend[${m}] -> dcgm-exporter:9400`),
        'prometheus -> dcgm-exporter:9400',
        ...models.flatMap((m) => [`prometheus -> backend[${m}]:8000`, `prometheus -> backend[${m}]:9400`]),
        'prometheus -> edge:9091',
        'prometheus -> envoy:9902',
        'prometheus -> router:8081',
        'prometheus -> envoy:8080',
        'prometheus -> envoy:8443',
        'stranger -> envoy:8080',
        'stranger -> envoy:8443',
        'neighbour -> envoy:8080',
        'neighbour -> envoy:8443',
        ...models.map((m) => `warmup[${m}] -> envoy:8080`),
      ].sort(),
    );
  });

  it('with envoyIngressFrom set, only those peers and the warmup reach Envoy', () => {
    const docs = parseManifests(
      template({
        set: [
          'networkPolicy.envoyIngressFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=ingress',
        ],
      }),
    );
    const lb: Pod = {
      ...stranger,
      name: 'lb',
      namespace: 'ingress',
      namespaceLabels: { 'kubernetes.io/metadata.name': 'ingress' },
    };
    const edges = allowedEdges(ofKind(docs, 'NetworkPolicy'), [...releasePods(docs, 'strata'), stranger, lb]);
    expect(edges.filter((e) => e.includes('-> envoy'))).toEqual([
      'lb -> envoy:8080',
      'warmup[llama-3-8b] -> envoy:8080',
    ]);
  });

  it("GPU Operator values: the backends reach the Operator's exporter through networkPolicy.dcgmEgress, nothing else of the release does", () => {
    const operatorExporter: Pod = {
      name: 'operator-dcgm',
      namespace: 'gpu-operator',
      namespaceLabels: { 'kubernetes.io/metadata.name': 'gpu-operator' },
      labels: { app: 'nvidia-dcgm-exporter' },
      ports: [9400],
    };
    const fromRelease = (values: string[]) => {
      const docs = parseManifests(template({ values }));
      const release = releasePods(docs, 'strata');
      const names = new Set(release.map((p) => p.name));
      return allowedEdges(ofKind(docs, 'NetworkPolicy'), [...release, operatorExporter]).filter(
        (e) => e.endsWith('-> operator-dcgm:9400') && names.has(e.split(' -> ')[0] as string),
      );
    };
    expect(fromRelease([gpuOperatorValues])).toEqual(['backend[llama-3-8b] -> operator-dcgm:9400']);
    // Without dcgmEgress (the default values) the backends cannot reach it.
    expect(fromRelease([])).toEqual([]);
    // The chart renders no exporter of its own there.
    const docs = parseManifests(template({ values: [gpuOperatorValues] }));
    expect(docs.some((d) => d.metadata.name === 'strata-dcgm-exporter')).toBe(false);
  });

  it('every policy restricts both directions and gives DNS egress to pods that make connections', () => {
    const docs = parseManifests(template({ values: [productionValues] }));
    for (const p of ofKind(docs, 'NetworkPolicy')) {
      expect(p.spec.policyTypes, p.metadata.name).toEqual(['Ingress', 'Egress']);
      const dns = (p.spec.egress ?? []).some((r: { ports?: { port: number; protocol: string }[] }) =>
        r.ports?.some((x) => x.port === 53 && x.protocol === 'UDP'),
      );
      // Redis and the dcgm-exporter open no connections.
      expect(dns, p.metadata.name).toBe(!['strata-redis', 'strata-dcgm-exporter'].includes(p.metadata.name));
    }
  });
});
