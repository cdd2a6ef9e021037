// The chart passes `helm lint --strict`, renders for every ci/ values file, and every rendered
// object is valid against the Kubernetes API schemas (kubernetes-validate, strict) or, for
// custom resources, against the CRDs' own schemas.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatErrors, loadCrdValidators } from './support/crd-schemas.js';
import { type K8sObject, parseManifests } from './support/manifests.js';
import {
  chartDir,
  gpuOperatorValues,
  helm,
  KUBE_VERSION,
  kubernetesValidate,
  productionValues,
  template,
} from './support/tools.js';

const CUSTOM_KINDS = new Set(['ServiceMonitor', 'PodMonitor', 'PrometheusRule', 'ScaledObject']);
const cases = [
  { name: 'default values', values: [] as string[] },
  { name: 'production values', values: [productionValues] },
  { name: 'GPU Operator values', values: [gpuOperatorValues] },
];
const tmp = mkdtempSync(join(tmpdir(), 'strata-helm-'));

describe.each(cases)('$name', ({ name, values }) => {
  let rendered = '';
  let docs: K8sObject[] = [];
  beforeAll(() => {
    rendered = template({ values });
    docs = parseManifests(rendered);
  });

  it('passes helm lint --strict with no errors or warnings', () => {
    const args = ['lint', chartDir, '--strict', '--kube-version', KUBE_VERSION, '--namespace', 'strata'];
    for (const v of values) args.push('-f', v);
    const r = helm(args);
    expect(r.stderr + r.stdout).toContain('1 chart(s) linted, 0 chart(s) failed');
    expect(r.stdout).not.toMatch(/\[(ERROR|WARNING)\]/);
    expect(r.status).toBe(0);
  });

  it('validates every built-in object against the Kubernetes API schemas (strict)', () => {
    const file = join(tmp, `${name.replace(/\W+/g, '-')}.yaml`);
    writeFileSync(file, rendered);
    const r = kubernetesValidate(file);
    const lines = r.stdout.split('\n').filter(Boolean);
    expect(lines.filter((l) => l.startsWith('ERROR'))).toEqual([]);
    // The only objects without a built-in schema are the custom resources, checked next.
    for (const warn of lines.filter((l) => l.startsWith('WARN'))) {
      expect(warn).toMatch(/kind (ServiceMonitor|PodMonitor|PrometheusRule|ScaledObject) /);
    }
    expect(r.status).toBe(0);
  });

  it('validates every custom resource against its CRD schema', () => {
    const crds = loadCrdValidators();
    for (const doc of docs.filter((d) => CUSTOM_KINDS.has(d.kind))) {
      const validate = crds.get(doc.apiVersion, doc.kind);
      expect(validate, `${doc.apiVersion} ${doc.kind}`).toBeDefined();
      const ok = validate?.(doc);
      expect(ok, `${doc.kind}/${doc.metadata.name}: ${formatErrors(validate?.errors)}`).toBe(true);
    }
  });

  it('renders only known kinds and no object twice', () => {
    const keys = docs.map((d) => `${d.kind}/${d.metadata.name}`);
    expect(new Set(keys).size).toBe(keys.length);
    const builtIn = new Set([
      'ConfigMap',
      'Secret',
      'Service',
      'Deployment',
      'DaemonSet',
      'Job',
      'HorizontalPodAutoscaler',
      'PodDisruptionBudget',
      'NetworkPolicy',
      'ServiceAccount',
      'Role',
      'RoleBinding',
      'PriorityClass',
    ]);
    for (const d of docs) expect(builtIn.has(d.kind) || CUSTOM_KINDS.has(d.kind), d.kind).toBe(true);
  });
});

describe('the validators themselves', () => {
  it('kubernetes-validate rejects an unknown field and a wrong type', () => {
    const file = join(tmp, 'bad.yaml');
    writeFileSync(
      file,
      [
        'apiVersion: apps/v1',
        'kind: Deployment',
        'metadata: { name: bad }',
        'spec:',
        '  replicas: "two"',
        '  selector: { matchLabels: { a: b } }',
        '  template:',
        '    metadata: { labels: { a: b } }',
        '    spec: { containers: [{ name: c, image: x, readinessProbe: { httpGet: { path: /, port: 1, bogus: 1 } } }] }',
      ].join('\n'),
    );
    const r = kubernetesValidate(file);
    expect(r.status).not.toBe(0);
    expect(r.stdout).toMatch(/^ERROR .*deployment\/bad/m);
  });

  it('the CRD schemas reject an unknown ServiceMonitor field and a bad ScaledObject', () => {
    const crds = loadCrdValidators();
    const sm = crds.get('monitoring.coreos.com/v1', 'ServiceMonitor');
    expect(
      sm?.({
        apiVersion: 'monitoring.coreos.com/v1',
        kind: 'ServiceMonitor',
        metadata: { name: 'x' },
        spec: { selector: {}, endpointz: [] },
      }),
    ).toBe(false);
    const so = crds.get('keda.sh/v1alpha1', 'ScaledObject');
    expect(
      so?.({
        apiVersion: 'keda.sh/v1alpha1',
        kind: 'ScaledObject',
        metadata: { name: 'x' },
        spec: { triggers: [] },
      }),
    ).toBe(false);
  });
});
