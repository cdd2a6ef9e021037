// Properties of the rendered workloads that the platform relies on: one backend per model with
// GPUs, probes matching the backend's warmup, drain ordering, the sidecar, security contexts,
// the labels dashboards and monitors select on, and the warmup hook.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
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
import { chartDir, helmTemplate, productionValues, template } from './support/tools.js';

const defaults = parseManifests(template());
const production = parseManifests(template({ values: [productionValues] }));
const defaultValues = parse(readFileSync(`${chartDir}/values.yaml`, 'utf8'));
const prodValues = parse(readFileSync(productionValues, 'utf8'));

const workloadKinds = new Set(['Deployment', 'Job']);
const backends = (docs: K8sObject[]) => ofKind(docs, 'Deployment').filter((d) => component(d) === 'backend');

describe.each([
  {
    name: 'default',
    docs: defaults,
    models: defaultValues.models as {
      name: string;
      gpus: number;
      servedModelName: string;
      gpuMemoryUtilization?: number;
    }[],
  },
  {
    name: 'production',
    docs: production,
    models: prodValues.models as {
      name: string;
      gpus: number;
      servedModelName: string;
      gpuMemoryUtilization?: number;
    }[],
  },
])('$name values', ({ docs, models }) => {
  it('renders one backend Deployment and Service per model, labelled with strata.dev/model', () => {
    expect(backends(docs).map((d) => d.metadata.labels['strata.dev/model'])).toEqual(
      models.map((m) => m.name),
    );
    for (const m of models) {
      const d = byName(docs, 'Deployment', `strata-backend-${m.name}`);
      expect(d.spec.selector.matchLabels['strata.dev/model']).toBe(m.name);
      expect(d.spec.template.metadata.labels['strata.dev/model']).toBe(m.name);
      const svc = byName(docs, 'Service', `strata-backend-${m.name}`);
      expect(svc.spec.selector).toEqual(d.spec.selector.matchLabels);
      expect(svc.spec.ports.map((p: { name: string }) => p.name)).toEqual(['http', 'sidecar']);
      expect(envOf(container(d, 'backend')).STRATA_SERVED_MODEL_NAME).toBe(m.servedModelName);
    }
  });

  it("passes each CUDA model's GPU memory share to the backend", () => {
    for (const m of models) {
      const env = envOf(container(byName(docs, 'Deployment', `strata-backend-${m.name}`), 'backend'));
      expect(env.STRATA_ENGINE_BACKEND).toBe('cuda');
      expect(env.STRATA_GPU_MEMORY_UTILIZATION).toBe(String(m.gpuMemoryUtilization));
    }
  });

  it('requests the model GPUs and schedules onto GPU nodes', () => {
    for (const m of models) {
      const d = byName(docs, 'Deployment', `strata-backend-${m.name}`);
      const res = container(d, 'backend').resources;
      expect(res.requests['nvidia.com/gpu']).toBe(m.gpus);
      expect(res.limits['nvidia.com/gpu']).toBe(m.gpus);
      expect(podSpec(d).nodeSelector['strata.dev/node-role']).toBe('gpu');
      expect(podSpec(d).tolerations).toContainEqual({
        key: 'nvidia.com/gpu',
        operator: 'Exists',
        effect: 'NoSchedule',
      });
      // Only the backend claims GPUs; the sidecar must not take one of its own.
      expect(container(d, 'observability').resources.limits?.['nvidia.com/gpu']).toBeUndefined();
    }
  });

  it('probes the backend: startup and readiness on /health/ready, liveness on /health/live', () => {
    for (const d of backends(docs)) {
      const c = container(d, 'backend');
      const http = c.ports.find((p: { name: string }) => p.name === 'http');
      expect(http.containerPort).toBe(8000);
      expect(envOf(c).PORT).toBe('8000');
      expect(c.startupProbe.httpGet).toEqual({ path: '/health/ready', port: 'http' });
      expect(c.readinessProbe.httpGet).toEqual({ path: '/health/ready', port: 'http' });
      expect(c.livenessProbe.httpGet).toEqual({ path: '/health/live', port: 'http' });
      // Model load plus the backend's own warmup: at least 10 minutes before the kubelet gives up.
      expect(c.startupProbe.periodSeconds * c.startupProbe.failureThreshold).toBeGreaterThanOrEqual(600);
    }
  });

  it('drains before the kubelet kills: grace > preStop sleep + STRATA_DRAIN_TIMEOUT_MS', () => {
    for (const d of backends(docs)) {
      const c = container(d, 'backend');
      const preStop = c.lifecycle.preStop.exec.command as string[];
      expect(preStop[0]).toBe('sleep');
      const sleepS = Number(preStop[1]);
      const drainS = Number(envOf(c).STRATA_DRAIN_TIMEOUT_MS) / 1000;
      expect(sleepS).toBeGreaterThan(0);
      expect(drainS).toBeGreaterThan(0);
      expect(podSpec(d).terminationGracePeriodSeconds).toBeGreaterThan(sleepS + drainS);
    }
    for (const name of ['strata-edge', 'strata-router']) {
      const d = byName(docs, 'Deployment', name);
      const drainS = Number(envOf(podSpec(d).containers[0]).STRATA_DRAIN_TIMEOUT_MS) / 1000;
      expect(podSpec(d).terminationGracePeriodSeconds).toBeGreaterThan(drainS);
    }
  });

  it('runs the observability sidecar in every backend pod, off the readiness path', () => {
    for (const d of backends(docs)) {
      const s = container(d, 'observability');
      expect(s.command).toEqual(['node', 'services/observability/dist/main.js']);
      expect(s.ports).toContainEqual({ name: 'sidecar', containerPort: 9400, protocol: 'TCP' });
      expect(envOf(s).STRATA_BACKEND_URL).toBe('http://127.0.0.1:8000');
      expect(envOf(s).PORT).toBe('9400');
      expect(s.readinessProbe).toBeUndefined();
      expect(s.livenessProbe.httpGet.path).toBe('/health/live');
    }
  });

  it('runs every container non-root, read-only, without capabilities', () => {
    for (const d of docs.filter((x) => workloadKinds.has(x.kind))) {
      const pod = podSpec(d);
      expect(pod.securityContext.runAsNonRoot, d.metadata.name).toBe(true);
      expect(pod.securityContext.runAsUser, d.metadata.name).toBeGreaterThan(0);
      for (const c of [...pod.containers, ...(pod.initContainers ?? [])]) {
        const where = `${d.metadata.name}/${c.name}`;
        expect(c.securityContext.readOnlyRootFilesystem, where).toBe(true);
        expect(c.securityContext.allowPrivilegeEscalation, where).toBe(false);
        expect(c.securityContext.capabilities.drop, where).toEqual(['ALL']);
        // The one exception: a node cache directory is created root-owned, so the backend's
        // cache-permissions init container chowns the model's directory as root with CHOWN alone
        // (backend.modelCache.prepare: false drops it where the nodes prepare the directory).
        if (c.name === 'cache-permissions') {
          expect(c.securityContext.capabilities.add, where).toEqual(['CHOWN']);
          expect(c.command.slice(0, 2), where).toEqual(['/bin/sh', '-c']);
          expect(c.volumeMounts, where).toEqual([{ name: 'models', mountPath: '/models' }]);
          continue;
        }
        expect(c.securityContext.capabilities.add, where).toBeUndefined();
        expect(c.securityContext.runAsUser ?? 1, where).not.toBe(0);
      }
    }
  });

  it('labels every object with name, instance, component and part-of', () => {
    for (const d of docs) {
      const l = d.metadata.labels ?? {};
      const where = `${d.kind}/${d.metadata.name}`;
      expect(l['app.kubernetes.io/name'], where).toBe('strata');
      expect(l['app.kubernetes.io/instance'], where).toBe('strata');
      expect(l['app.kubernetes.io/part-of'], where).toBe('strata');
      expect(l['app.kubernetes.io/component'], where).toMatch(/^[a-z-]+$/);
      if (workloadKinds.has(d.kind)) {
        const pl = d.spec.template.metadata.labels;
        expect(pl['app.kubernetes.io/component'], where).toBe(l['app.kubernetes.io/component']);
      }
    }
  });

  it('points every Service, HPA and PDB at pods that exist', () => {
    const templates = docs
      .filter((d) => d.kind === 'Deployment' || d.kind === 'DaemonSet')
      .map((d) => d.spec.template.metadata.labels);
    const selects = (sel: Record<string, string>) =>
      templates.some((labels) => Object.entries(sel).every(([k, v]) => labels[k] === v));
    for (const s of ofKind(docs, 'Service')) expect(selects(s.spec.selector), s.metadata.name).toBe(true);
    for (const p of ofKind(docs, 'PodDisruptionBudget'))
      expect(selects(p.spec.selector.matchLabels)).toBe(true);
    for (const h of ofKind(docs, 'HorizontalPodAutoscaler')) {
      const target = byName(docs, 'Deployment', h.spec.scaleTargetRef.name);
      // An autoscaled Deployment leaves replicas to the HPA.
      expect(target.spec.replicas).toBeUndefined();
    }
  });

  it('wires edge -> router -> backends by Service name', () => {
    const edge = envOf(container(byName(docs, 'Deployment', 'strata-edge'), 'edge'));
    expect(edge.STRATA_ROUTER_URL).toBe('http://strata-router:8081');
    expect(edge.PORT).toBe('8080');
    const router = byName(docs, 'Deployment', 'strata-router');
    expect(envOf(container(router, 'router')).STRATA_ROUTES_FILE).toBe('/etc/strata/routes/routes.yaml');
    expect(podSpec(router).serviceAccountName).toBe('strata-router');
  });

  it('gives the router exactly get/list/watch on EndpointSlices', () => {
    const role = byName(docs, 'Role', 'strata-router-discovery');
    expect(role.rules).toEqual([
      { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] },
    ]);
    const binding = byName(docs, 'RoleBinding', 'strata-router-discovery');
    expect(binding.roleRef).toEqual({
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'Role',
      name: 'strata-router-discovery',
    });
    expect(binding.subjects).toEqual([
      { kind: 'ServiceAccount', name: 'strata-router', namespace: 'strata' },
    ]);
    // Nothing else mounts an API token.
    for (const d of docs.filter((x) => workloadKinds.has(x.kind) && component(x) !== 'router')) {
      expect(podSpec(d).automountServiceAccountToken, d.metadata.name).toBe(false);
    }
  });

  it('runs the warmup as a post-install/post-upgrade hook per model that fails the release', () => {
    const jobs = ofKind(docs, 'Job');
    expect(jobs.map((j) => j.metadata.labels['strata.dev/model'])).toEqual(models.map((m) => m.name));
    for (const [i, m] of models.entries()) {
      const job = jobs[i] as K8sObject;
      expect(job.metadata.annotations['helm.sh/hook']).toBe('post-install,post-upgrade');
      expect(job.metadata.annotations['helm.sh/hook-delete-policy']).toBe(
        'before-hook-creation,hook-succeeded',
      );
      expect(job.spec.backoffLimit).toBe(0);
      expect(podSpec(job).restartPolicy).toBe('Never');
      const cmd = container(job, 'warmup').command as string[];
      expect(cmd[0]).toBe('strata-warmup');
      const arg = (flag: string) => cmd[cmd.indexOf(flag) + 1];
      // Through Envoy's in-cluster listener: the full path, Envoy included.
      expect(arg('--url')).toBe('http://strata-envoy-internal:8080');
      expect(arg('--model')).toBe(m.servedModelName);
      expect(Number(arg('--ttft-bound-ms'))).toBeGreaterThan(0);
      expect(job.spec.activeDeadlineSeconds).toBeGreaterThan(Number(arg('--timeout-s')));
    }
  });
});

describe('production values', () => {
  const backendEnv = (docs: K8sObject[]) =>
    envOf(container(byName(docs, 'Deployment', 'strata-backend-llama-3-8b'), 'backend'));
  // The production values with one setting on their model (a list: --set would replace it).
  const withModelSetting = (key: string, value: string) => {
    const values = structuredClone(prodValues);
    values.models[0][key] = value;
    const file = join(mkdtempSync(join(tmpdir(), 'strata-helm-')), `${key}-${value}.yaml`);
    writeFileSync(file, stringify(values));
    return file;
  };

  it("passes a model's HTTP event loops to the backend only when set", () => {
    expect(backendEnv(production).STRATA_HTTP_WORKERS).toBe('4');
    expect(backendEnv(defaults).STRATA_HTTP_WORKERS).toBeUndefined();
  });

  it.each([
    {
      what: 'CPU weights dtype',
      key: 'cpuWeightsDtype',
      variable: 'STRATA_CPU_WEIGHTS_DTYPE',
      good: 'float32',
      bad: 'float16',
    },
    { what: 'CPU kernel set', key: 'cpuKernels', variable: 'STRATA_CPU_KERNELS', good: 'amx', bad: 'avx512' },
  ])(
    "passes a model's $what to the backend only when set, and refuses another",
    ({ key, variable, good, bad }) => {
      expect(backendEnv(parseManifests(template({ values: [withModelSetting(key, good)] })))[variable]).toBe(
        good,
      );
      expect(backendEnv(production)[variable]).toBeUndefined();
      const refused = helmTemplate({ values: [withModelSetting(key, bad)] });
      expect(refused.status).not.toBe(0);
      expect(refused.stderr).toContain(key);
    },
  );

  it('hands backend replicas to KEDA on vllm:num_requests_waiting', () => {
    const scaled = ofKind(production, 'ScaledObject');
    expect(scaled).toHaveLength(2);
    for (const so of scaled) {
      const target = byName(production, 'Deployment', so.spec.scaleTargetRef.name);
      expect(target.spec.replicas).toBeUndefined();
      expect(so.spec.triggers[0].type).toBe('prometheus');
      expect(so.spec.triggers[0].metadata.query).toMatch(
        /^sum\(vllm:num_requests_waiting\{namespace="strata",model_name="[^"]+"\}\)$/,
      );
    }
  });

  it('terminates TLS at Envoy from the named Secret and keeps plaintext off the public Service', () => {
    const envoy = byName(production, 'Deployment', 'strata-envoy');
    expect(podSpec(envoy).volumes).toContainEqual({ name: 'tls', secret: { secretName: 'strata-tls' } });
    const pub = byName(production, 'Service', 'strata-envoy');
    expect(pub.spec.ports.map((p: { name: string }) => p.name)).toEqual(['https']);
    expect(pub.spec.type).toBe('LoadBalancer');
  });

  it('uses the external Redis and renders no Redis of its own', () => {
    expect(production.some((d) => component(d) === 'redis')).toBe(false);
    const edge = envOf(container(byName(production, 'Deployment', 'strata-edge'), 'edge'));
    expect(edge.REDIS_URL).toBe(prodValues.redis.externalUrl);
    expect(edge.STRATA_EDGE_TENANTS_FILE).toBe('/etc/strata/tenants/tenants.yaml');
  });

  it('scrapes backends and sidecars with the model label the dashboards group by', () => {
    const sm = byName(production, 'ServiceMonitor', 'strata-backend');
    expect(sm.spec.endpoints.map((e: { port: string }) => e.port)).toEqual(['http', 'sidecar']);
    expect(sm.spec.podTargetLabels).toContain('strata.dev/model');
    // The services' own `service` label (edge-gateway, ...) is what the dashboards group by.
    for (const monitor of ofKind(production, 'ServiceMonitor')) {
      for (const e of monitor.spec.endpoints) expect(e.honorLabels, monitor.metadata.name).toBe(true);
    }
    for (const monitor of ofKind(production, 'ServiceMonitor')) {
      const services = ofKind(production, 'Service').filter(
        (s) =>
          Object.entries(monitor.spec.selector.matchLabels as Record<string, string>).every(
            ([k, v]) => s.metadata.labels[k] === v,
          ) && !s.metadata.labels['strata.dev/headless'],
      );
      expect(services.length, monitor.metadata.name).toBeGreaterThan(0);
      for (const e of monitor.spec.endpoints) {
        const served = services.some((s) => s.spec.ports.some((p: { name: string }) => p.name === e.port));
        expect(served, `${monitor.metadata.name}:${e.port}`).toBe(true);
      }
    }
  });
});

describe('values that must not render', () => {
  it('refuses a termination grace that would cut the drain short', () => {
    const r = helmTemplate({
      set: [
        'models[0].name=m',
        'models[0].servedModelName=m',
        'models[0].replicas=1',
        'models[0].gpus=1',
        'models[0].engineBackend=cuda',
        'models[0].path=m',
        'models[0].volume.type=emptyDir',
        'models[0].source.uri=',
        'models[0].resources.requests.cpu=1',
        'models[0].terminationGracePeriodSeconds=60',
      ],
    });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain(
      'models[m].terminationGracePeriodSeconds=60 must exceed backend.preStopSleepSeconds + drain timeout = 130s',
    );
  });

  it('refuses tenants without a warmup API key, and two models with one name', () => {
    const noKey = helmTemplate({ set: ['edge.tenants.existingSecret=t'] });
    expect(noKey.status).not.toBe(0);
    expect(noKey.stderr).toContain('warmup.apiKeySecret is required when edge.tenants are set');
    const twice = helmTemplate({ values: [productionValues], set: ['models[1].name=llama-3-8b'] });
    expect(twice.stderr).toContain('models: the name "llama-3-8b" appears twice');
  });

  it('refuses TLS without a certificate Secret', () => {
    const r = helmTemplate({ set: ['envoy.listeners.https.enabled=true'] });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('envoy.listeners.https.secretName is required when TLS is enabled');
  });
});
