// GPU telemetry as the chart sets it up (docs/kubernetes.md#gpu-telemetry): NVIDIA's
// dcgm-exporter as a DaemonSet on the backends' nodes, its node-local Service and
// ServiceMonitor, the sidecars pointed at it (their env accepted by the sidecar's own config
// schema), and runtimeClassName on the GPU pods.
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../services/common/src/config.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from '../../services/observability/src/config.js';
import { DCGM_FIELDS_READ } from '../../services/observability/src/gpu/dcgm.js';
import { formatErrors, loadCrdValidators } from './support/crd-schemas.js';
import {
  byName,
  component,
  container,
  envOf,
  type K8sObject,
  ofKind,
  parseManifests,
  podSpec,
} from './support/manifests.js';
import { gpuOperatorValues, productionValues, template } from './support/tools.js';

const defaults = parseManifests(template());
const production = parseManifests(template({ values: [productionValues] }));
const operator = parseManifests(template({ values: [gpuOperatorValues] }));
const backends = (docs: K8sObject[]) => ofKind(docs, 'Deployment').filter((d) => component(d) === 'backend');
const EXPORTER = 'strata-dcgm-exporter';

const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

/** The counters CSV's field names (comments and blank lines skipped). */
function counterFields(docs: K8sObject[]): string[] {
  const csv = byName(docs, 'ConfigMap', EXPORTER).data['counters.csv'] as string;
  const lines = csv.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'));
  for (const line of lines) expect(line).toMatch(/^DCGM_FI_[A-Z0-9_]+, (gauge|counter|label), \S/);
  return lines.map((l) => l.split(',')[0] as string);
}

describe.each([
  { name: 'default', docs: defaults },
  { name: 'production', docs: production },
])('$name values: dcgm-exporter', ({ docs }) => {
  it('runs as a DaemonSet wherever a backend can run: same tolerations, a nodeSelector every backend includes', () => {
    const ds = byName(docs, 'DaemonSet', EXPORTER);
    for (const b of backends(docs)) {
      expect(podSpec(ds).tolerations).toEqual(podSpec(b).tolerations);
      expect(matches(podSpec(ds).nodeSelector, podSpec(b).nodeSelector), b.metadata.name).toBe(true);
    }
    expect(podSpec(ds).nodeSelector).toEqual({ 'strata.dev/node-role': 'gpu' });
  });

  it("pins NVIDIA's image and runs it as NVIDIA documents: root, SYS_ADMIN for profiling, the pod mapping on", () => {
    const ds = byName(docs, 'DaemonSet', EXPORTER);
    const c = container(ds, 'exporter');
    expect(c.image).toBe('nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04');
    expect(c.securityContext).toEqual({
      runAsNonRoot: false,
      runAsUser: 0,
      capabilities: { add: ['SYS_ADMIN'] },
    });
    const env = envOf(c);
    expect(env.DCGM_EXPORTER_KUBERNETES).toBe('true');
    expect(env.DCGM_EXPORTER_LISTEN).toBe(':9400');
    expect(c.env).toContainEqual({
      name: 'NODE_NAME',
      valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } },
    });
    // The GPU-to-pod mapping comes from the kubelet's pod-resources socket.
    expect(podSpec(ds).volumes).toContainEqual({
      name: 'pod-resources',
      hostPath: { path: '/var/lib/kubelet/pod-resources', type: 'Directory' },
    });
    expect(c.volumeMounts).toContainEqual({
      name: 'pod-resources',
      mountPath: '/var/lib/kubelet/pod-resources',
      readOnly: true,
    });
    // The counters file is the chart's ConfigMap, and a changed list rolls the pods.
    expect(c.args).toEqual(['-f', '/etc/dcgm-exporter/strata/counters.csv']);
    expect(podSpec(ds).volumes).toContainEqual({ name: 'counters', configMap: { name: EXPORTER } });
    expect(ds.spec.template.metadata.annotations['checksum/counters']).toMatch(/^[0-9a-f]{64}$/);
    expect(podSpec(ds).automountServiceAccountToken).toBe(false);
    expect(c.ports).toEqual([{ name: 'metrics', containerPort: 9400, protocol: 'TCP' }]);
  });

  it('collects every field the sidecar reads (the framebuffer total is computed from used + free)', () => {
    const fields = counterFields(docs);
    const computed = new Set(['DCGM_FI_DEV_FB_TOTAL', 'DCGM_FI_DEV_FB_RESERVED']);
    for (const f of DCGM_FIELDS_READ.filter((x) => !computed.has(x))) expect(fields, f).toContain(f);
    expect(new Set(fields).size).toBe(fields.length);
  });

  it('puts a node-local Service in front of it and points every sidecar at that Service', () => {
    const svc = byName(docs, 'Service', EXPORTER);
    expect(svc.spec.internalTrafficPolicy).toBe('Local');
    expect(svc.spec.ports).toEqual([{ name: 'metrics', port: 9400, targetPort: 'metrics', protocol: 'TCP' }]);
    const ds = byName(docs, 'DaemonSet', EXPORTER);
    expect(matches(svc.spec.selector, ds.spec.template.metadata.labels)).toBe(true);
    // No other workload's pods behind it.
    for (const d of [...ofKind(docs, 'Deployment'), ...ofKind(docs, 'Job')])
      expect(matches(svc.spec.selector, d.spec.template.metadata.labels), d.metadata.name).toBe(false);
    for (const b of backends(docs)) {
      const s = container(b, 'observability');
      const env = envOf(s);
      expect(env.STRATA_DCGM_URL).toBe('http://strata-dcgm-exporter:9400/metrics');
      for (const [name, fieldPath] of [
        ['STRATA_POD_NAME', 'metadata.name'],
        ['STRATA_POD_NAMESPACE', 'metadata.namespace'],
        ['STRATA_NODE_IP', 'status.hostIP'],
      ])
        expect(s.env).toContainEqual({ name, valueFrom: { fieldRef: { fieldPath } } });
      // The sidecar's own config accepts what the chart sets (downward API values filled in).
      const config = loadConfig({
        schema: configSchema,
        envMap: configEnv,
        fileEnv: CONFIG_FILE_ENV,
        env: { ...env, STRATA_POD_NAME: 'strata-backend-x-1', STRATA_POD_NAMESPACE: 'strata' },
      });
      expect(config.gpu.dcgmUrl).toBe('http://strata-dcgm-exporter:9400/metrics');
      expect(config.pod).toEqual({ name: 'strata-backend-x-1', namespace: 'strata' });
    }
  });

  it('sets no runtimeClassName by default', () => {
    for (const d of [...backends(docs), byName(docs, 'DaemonSet', EXPORTER)])
      expect(podSpec(d).runtimeClassName, d.metadata.name).toBeUndefined();
  });
});

describe('dcgm-exporter options', () => {
  it('production: a ServiceMonitor scrapes every exporter through the Service, keeping the pod labels', () => {
    const sm = byName(production, 'ServiceMonitor', EXPORTER);
    const svc = byName(production, 'Service', EXPORTER);
    expect(matches(sm.spec.selector.matchLabels, svc.metadata.labels)).toBe(true);
    expect(sm.spec.endpoints).toEqual([
      { port: 'metrics', path: '/metrics', honorLabels: true, interval: '15s' },
    ]);
    expect(sm.metadata.labels.release).toBe('kube-prometheus-stack');
    const validate = loadCrdValidators().get('monitoring.coreos.com/v1', 'ServiceMonitor');
    expect(validate?.(sm), formatErrors(validate?.errors)).toBe(true);
    // Without the Prometheus Operator (default values) there is none.
    expect(ofKind(defaults, 'ServiceMonitor')).toEqual([]);
  });

  it('profiling off: no SYS_ADMIN and no profiling fields; privileged: as the GPU Operator runs it', () => {
    const off = parseManifests(template({ set: ['dcgmExporter.profiling=false'] }));
    expect(container(byName(off, 'DaemonSet', EXPORTER), 'exporter').securityContext).toEqual({
      runAsNonRoot: false,
      runAsUser: 0,
    });
    expect(counterFields(off).filter((f) => f.startsWith('DCGM_FI_PROF_'))).toEqual([]);
    expect(counterFields(defaults)).toContain('DCGM_FI_PROF_SM_ACTIVE');
    const onCounters = byName(defaults, 'DaemonSet', EXPORTER).spec.template.metadata.annotations;
    const offCounters = byName(off, 'DaemonSet', EXPORTER).spec.template.metadata.annotations;
    expect(offCounters['checksum/counters']).not.toBe(onCounters['checksum/counters']);
    const privileged = parseManifests(template({ set: ['dcgmExporter.privileged=true'] }));
    expect(container(byName(privileged, 'DaemonSet', EXPORTER), 'exporter').securityContext).toEqual({
      runAsNonRoot: false,
      runAsUser: 0,
      privileged: true,
    });
  });

  it('renders runtimeClassName on the backends and the exporter when set, the exporter may name its own', () => {
    const set = parseManifests(template({ set: ['backend.runtimeClassName=nvidia'] }));
    for (const d of [...backends(set), byName(set, 'DaemonSet', EXPORTER)])
      expect(podSpec(d).runtimeClassName, d.metadata.name).toBe('nvidia');
    for (const d of ofKind(set, 'Deployment').filter((x) => component(x) !== 'backend'))
      expect(podSpec(d).runtimeClassName, d.metadata.name).toBeUndefined();
    const own = parseManifests(
      template({ set: ['backend.runtimeClassName=nvidia', 'dcgmExporter.runtimeClassName=nvidia-cdi'] }),
    );
    expect(podSpec(byName(own, 'DaemonSet', EXPORTER)).runtimeClassName).toBe('nvidia-cdi');
  });

  it("GPU Operator values: no exporter of the chart's; the sidecars read the given URL, without nvidia-smi", () => {
    for (const kind of ['DaemonSet', 'Service', 'ConfigMap', 'NetworkPolicy', 'ServiceMonitor'])
      expect(
        ofKind(operator, kind).some((d) => d.metadata.name === EXPORTER),
        kind,
      ).toBe(false);
    for (const b of backends(operator)) {
      const env = envOf(container(b, 'observability'));
      expect(env.STRATA_DCGM_URL).toBe('http://nvidia-dcgm-exporter-local.gpu-operator.svc:9400/metrics');
      expect(env.NVIDIA_VISIBLE_DEVICES).toBeUndefined();
      expect(podSpec(b).runtimeClassName).toBe('nvidia');
    }
  });

  it('no DCGM URL at all when the exporter is off and none is given: the sidecar uses nvidia-smi', () => {
    const docs = parseManifests(template({ set: ['dcgmExporter.enabled=false'] }));
    for (const b of backends(docs)) {
      const env = envOf(container(b, 'observability'));
      expect('STRATA_DCGM_URL' in env).toBe(false);
      expect(env.NVIDIA_VISIBLE_DEVICES).toBe('all');
    }
  });
});
