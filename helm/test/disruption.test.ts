// Disruption safety (docs/kubernetes.md#disruption): a PodDisruptionBudget per model that
// selects exactly that model's backend pods, one for Redis, zone and node spreads for Envoy,
// edge, router and the backends, and a PriorityClass on every pod, so a node-group upgrade
// cannot drain every replica of a model at once.
import { describe, expect, it } from 'vitest';
import { byName, component, type K8sObject, ofKind, parseManifests, podSpec } from './support/manifests.js';
import { gpuOperatorValues, helmTemplate, productionValues, template } from './support/tools.js';

const defaults = parseManifests(template());
const production = parseManifests(template({ values: [productionValues] }));
const operator = parseManifests(template({ values: [gpuOperatorValues] }));

const podTemplates = (docs: K8sObject[]) =>
  docs.filter((d) => ['Deployment', 'DaemonSet', 'Job'].includes(d.kind));
const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);
const backends = (docs: K8sObject[]) => ofKind(docs, 'Deployment').filter((d) => component(d) === 'backend');

const TIER_OF: Record<string, 'critical' | 'backend' | 'default'> = {
  envoy: 'critical',
  edge: 'critical',
  router: 'critical',
  redis: 'critical',
  backend: 'backend',
  'dcgm-exporter': 'backend',
  warmup: 'default',
};

describe.each([
  { name: 'default', docs: defaults },
  { name: 'production', docs: production },
  { name: 'GPU Operator', docs: operator },
])('$name values', ({ docs }) => {
  it("has one budget per model whose selector matches exactly that model's backend pods", () => {
    const models = backends(docs).map((d) => d.metadata.labels['strata.dev/model'] as string);
    const budgets = ofKind(docs, 'PodDisruptionBudget').filter((p) => component(p) === 'backend');
    expect(budgets.map((p) => p.metadata.labels['strata.dev/model']).sort()).toEqual([...models].sort());
    for (const pdb of budgets) {
      const model = pdb.metadata.labels['strata.dev/model'];
      // Among every pod the release runs (warmup Jobs of the same model included), exactly its Deployment's.
      const selected = podTemplates(docs).filter((d) =>
        matches(pdb.spec.selector.matchLabels, d.spec.template.metadata.labels),
      );
      expect(selected.map((d) => `${d.kind}/${d.metadata.name}`)).toEqual([
        `Deployment/strata-backend-${model}`,
      ]);
      expect(pdb.spec.selector.matchLabels).toEqual(
        byName(docs, 'Deployment', `strata-backend-${model}`).spec.selector.matchLabels,
      );
      // Exactly one of the two limits, and not-ready pods never block a drain.
      expect('maxUnavailable' in pdb.spec !== 'minAvailable' in pdb.spec, pdb.metadata.name).toBe(true);
      expect(pdb.spec.unhealthyPodEvictionPolicy).toBe('AlwaysAllow');
    }
  });

  it('spreads Envoy, edge, router and every backend over zones and nodes, maxSkew 1, on its own pods', () => {
    const spread = ofKind(docs, 'Deployment').filter((d) => component(d) !== 'redis');
    expect(spread.map((d) => component(d)).sort()).toEqual(
      [...backends(docs).map(() => 'backend'), 'edge', 'envoy', 'router'].sort(),
    );
    for (const d of spread) {
      const constraints = podSpec(d).topologySpreadConstraints as Record<string, unknown>[];
      expect(
        constraints.map((c) => c.topologyKey),
        d.metadata.name,
      ).toEqual(['topology.kubernetes.io/zone', 'kubernetes.io/hostname']);
      for (const c of constraints) {
        expect(c.maxSkew).toBe(1);
        expect(c.nodeTaintsPolicy).toBe('Honor');
        expect((c.labelSelector as { matchLabels: unknown }).matchLabels).toEqual(
          d.spec.selector.matchLabels,
        );
        expect(c.matchLabelKeys).toEqual(['pod-template-hash']);
      }
      expect(constraints[0]?.whenUnsatisfiable, d.metadata.name).toBe('ScheduleAnyway');
    }
  });

  it('gives every pod the PriorityClass of its tier', () => {
    for (const d of podTemplates(docs)) {
      const tier = TIER_OF[component(d) as string];
      expect(tier, d.metadata.name).toBeDefined();
    }
    const classes = new Map(ofKind(docs, 'PriorityClass').map((c) => [c.metadata.name, c]));
    if (classes.size === 0) return;
    for (const d of podTemplates(docs)) {
      const name = podSpec(d).priorityClassName;
      expect(classes.has(name), `${d.metadata.name}: ${name}`).toBe(true);
      expect(name, d.metadata.name).toBe(`strata-${TIER_OF[component(d) as string]}`);
    }
  });
});

describe('PriorityClasses the chart creates', () => {
  it('ranks the request path above the backends above the rest, and the rest never preempts', () => {
    const value = (name: string) => byName(defaults, 'PriorityClass', name).value as number;
    expect(value('strata-critical')).toBeGreaterThan(value('strata-backend'));
    expect(value('strata-backend')).toBeGreaterThan(value('strata-default'));
    // User classes stop at 1e9; above is reserved for system-cluster/node-critical.
    expect(value('strata-critical')).toBeLessThanOrEqual(1_000_000_000);
    expect(byName(defaults, 'PriorityClass', 'strata-default').preemptionPolicy).toBe('Never');
    for (const c of ofKind(defaults, 'PriorityClass')) expect(c.globalDefault).toBe(false);
  });

  it('with create false, uses the named classes and sets none where the name is empty', () => {
    expect(ofKind(operator, 'PriorityClass')).toEqual([]);
    for (const d of podTemplates(operator)) {
      const expected = { critical: 'platform-critical', backend: 'inference-serving', default: undefined }[
        TIER_OF[component(d) as string] as 'critical' | 'backend' | 'default'
      ];
      expect(podSpec(d).priorityClassName, d.metadata.name).toBe(expected);
    }
    const none = parseManifests(template({ set: ['priorityClasses.create=false'] }));
    for (const d of podTemplates(none)) expect(podSpec(d).priorityClassName, d.metadata.name).toBeUndefined();
  });

  it('renames a class on request and the pods follow', () => {
    const docs = parseManifests(template({ set: ['priorityClasses.backend.name=gpu-serving'] }));
    expect(
      ofKind(docs, 'PriorityClass')
        .map((c) => c.metadata.name)
        .sort(),
    ).toEqual(['gpu-serving', 'strata-critical', 'strata-default']);
    expect(podSpec(byName(docs, 'Deployment', 'strata-backend-llama-3-8b')).priorityClassName).toBe(
      'gpu-serving',
    );
    expect(podSpec(byName(docs, 'DaemonSet', 'strata-dcgm-exporter')).priorityClassName).toBe('gpu-serving');
  });
});

describe('budgets and spreads by value', () => {
  it('maxUnavailable 1 per model by default, minAvailable when a model sets it', () => {
    expect(byName(defaults, 'PodDisruptionBudget', 'strata-backend-llama-3-8b').spec.maxUnavailable).toBe(1);
    const pdb = byName(operator, 'PodDisruptionBudget', 'strata-backend-llama-3-8b').spec;
    expect(pdb.minAvailable).toBe(2);
    expect(pdb.maxUnavailable).toBeUndefined();
    const off = parseManifests(template({ set: ['backend.pdb.enabled=false'] }));
    expect(ofKind(off, 'PodDisruptionBudget').filter((p) => component(p) === 'backend')).toEqual([]);
  });

  it("covers the chart's Redis with a budget that lets a drain evict its one replica, and no budget for an external one", () => {
    const redis = byName(defaults, 'PodDisruptionBudget', 'strata-redis');
    expect(redis.spec).toEqual({
      maxUnavailable: 1,
      selector: { matchLabels: byName(defaults, 'Deployment', 'strata-redis').spec.selector.matchLabels },
    });
    expect(ofKind(production, 'PodDisruptionBudget').some((p) => component(p) === 'redis')).toBe(false);
  });

  it('makes the node spread a rule when asked, and drops spreads when disabled', () => {
    const hostname = (docs: K8sObject[]) =>
      (
        podSpec(byName(docs, 'Deployment', 'strata-edge')).topologySpreadConstraints as {
          whenUnsatisfiable: string;
        }[]
      )[1]?.whenUnsatisfiable;
    expect(hostname(defaults)).toBe('ScheduleAnyway');
    expect(hostname(operator)).toBe('DoNotSchedule');
    const off = parseManifests(template({ set: ['topologySpread.enabled=false'] }));
    for (const d of ofKind(off, 'Deployment'))
      expect(podSpec(d).topologySpreadConstraints, d.metadata.name).toBeUndefined();
  });
});

describe('values.schema.json for the new values', () => {
  it.each([
    {
      set: ['topologySpread.nodeWhenUnsatisfiable=Sometimes'],
      message: "at '/topologySpread/nodeWhenUnsatisfiable'",
    },
    { set: ['priorityClasses.critical.value=2000000000'], message: "at '/priorityClasses/critical/value'" },
    { set: ['priorityClasses.backend.name=GPU_Serving'], message: "at '/priorityClasses/backend/name'" },
    { set: ['backend.pdb.maxUnavailable=one'], message: "at '/backend/pdb/maxUnavailable'" },
    {
      set: ['redis.pdb.minAvail=1'],
      message: "at '/redis/pdb': additional properties 'minAvail' not allowed",
    },
    {
      set: ['dcgmExporter.enable=true'],
      message: "at '/dcgmExporter': additional properties 'enable' not allowed",
    },
    { set: ['backend.runtimeClassName=Nvidia_GPU'], message: "at '/backend/runtimeClassName'" },
    { set: ['backend.sidecar.dcgmUrl=dcgm:9400/metrics'], message: "at '/backend/sidecar/dcgmUrl'" },
  ])('rejects $set with a message naming the field', ({ set, message }) => {
    const r = helmTemplate({ set });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("values don't meet the specifications of the schema");
    expect(r.stderr).toContain(message);
  });
});
