// Model storage: where the weights come from (models[].source: s3://, hf://, or none) and where
// they go (volume.type nodeCache, the per-node cache; pvc; hostPath; emptyDir). The fetch-model
// init container runs the backend image's own downloader; the backends' ServiceAccount carries
// the IRSA role for S3; a ReadWriteOnce claim under several replicas is refused.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import {
  byName,
  container,
  envOf,
  type K8sObject,
  ofKind,
  parseManifests,
  podSpec,
} from './support/manifests.js';
import { helmTemplate, productionValues, template } from './support/tools.js';

const dir = mkdtempSync(join(tmpdir(), 'strata-model-storage-'));
let files = 0;
/** A values file with one model, `model` merged over a minimal valid entry. */
function oneModel(model: Record<string, unknown>, extra: Record<string, unknown> = {}): string {
  const file = join(dir, `values-${files++}.yaml`);
  const base = {
    name: 'm',
    servedModelName: 'm',
    replicas: 1,
    gpus: 1,
    engineBackend: 'cuda',
    resources: { requests: { cpu: '1' } },
    volume: { type: 'nodeCache' },
    path: 'm',
    source: { uri: 's3://models/m' },
  };
  writeFileSync(file, stringify({ models: [{ ...base, ...model }], ...extra }));
  return file;
}

const render = (values: string[]) => {
  const r = helmTemplate({ values });
  if (r.status !== 0) throw new Error(r.stderr);
  return parseManifests(r.stdout);
};
const backendOf = (docs: K8sObject[], model: string) => byName(docs, 'Deployment', `strata-backend-${model}`);
const initOf = (d: K8sObject, name: string) =>
  (podSpec(d).initContainers ?? []).find((c: { name: string }) => c.name === name);
const volumeOf = (d: K8sObject) => podSpec(d).volumes.find((v: { name: string }) => v.name === 'models');

describe('the default model: Hugging Face into the node cache', () => {
  const docs = parseManifests(template());
  const d = backendOf(docs, 'llama-3-8b');

  it("fetches with the backend image's own downloader, nothing installed at start", () => {
    const fetch = initOf(d, 'fetch-model');
    expect(fetch.image).toBe(container(d, 'backend').image);
    expect(fetch.command).toEqual(['node', 'services/inference-backend/dist/cli/fetch-model.js']);
    expect(fetch.args).toEqual([
      '--source=hf://meta-llama/Meta-Llama-3-8B-Instruct@main',
      '--dest=/models/Meta-Llama-3-8B-Instruct',
      '--stale-lock-s=60',
      '--wait-timeout-s=7200',
      '--progress-interval-s=5',
      '--concurrency=4',
    ]);
    expect(JSON.stringify(podSpec(d).initContainers)).not.toMatch(/pip|python|huggingface_hub/);
    expect(fetch.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(fetch.volumeMounts).toContainEqual({ name: 'models', mountPath: '/models' });
  });

  it('mounts the node cache directory, read-only for the backend, after handing the model directory to the service user', () => {
    expect(volumeOf(d)).toEqual({
      name: 'models',
      hostPath: { path: '/mnt/k8s-disks/0/strata-models', type: 'DirectoryOrCreate' },
    });
    expect(container(d, 'backend').volumeMounts).toContainEqual({
      name: 'models',
      mountPath: '/models',
      readOnly: true,
    });
    const perms = initOf(d, 'cache-permissions');
    expect(podSpec(d).initContainers.map((c: { name: string }) => c.name)).toEqual([
      'cache-permissions',
      'fetch-model',
    ]);
    expect(perms.command.at(-1)).toBe('/models/Meta-Llama-3-8B-Instruct');
    expect(perms.command[2]).toContain('chown 10001:10001');
    expect(perms.securityContext.capabilities).toEqual({ drop: ['ALL'], add: ['CHOWN'] });
  });

  it('runs under the backends ServiceAccount, which mounts no API token', () => {
    const sa = byName(docs, 'ServiceAccount', 'strata-backend');
    expect(sa.automountServiceAccountToken).toBe(false);
    expect(sa.metadata.annotations).toBeUndefined();
    expect(podSpec(d).serviceAccountName).toBe('strata-backend');
    expect(podSpec(d).automountServiceAccountToken).toBe(false);
  });
});

describe('the production example', () => {
  const docs = parseManifests(template({ values: [productionValues] }));

  it('reads S3 with the IRSA role on the ServiceAccount and requires checksums', () => {
    const sa = byName(docs, 'ServiceAccount', 'strata-backend');
    expect(sa.metadata.annotations['eks.amazonaws.com/role-arn']).toMatch(/^arn:aws:iam::\d{12}:role\//);
    const fetch = initOf(backendOf(docs, 'llama-3-8b'), 'fetch-model');
    expect(fetch.args[0]).toMatch(/^--source=s3:\/\//);
    expect(fetch.args).toContain('--require-checksum');
    expect(fetch.env.map((e: { name: string }) => e.name)).not.toContain('AWS_ACCESS_KEY_ID');
  });

  it('passes the Hugging Face token from its Secret', () => {
    const fetch = initOf(backendOf(docs, 'mistral-7b'), 'fetch-model');
    expect(fetch.args[0]).toMatch(/^--source=hf:\/\/mistralai\//);
    expect(fetch.env).toContainEqual({
      name: 'HF_TOKEN',
      valueFrom: { secretKeyRef: { name: 'hf-token', key: 'token' } },
    });
  });

  it('puts no replica set on a ReadWriteOnce claim', () => {
    for (const d of ofKind(docs, 'Deployment').filter((x) => x.metadata.name.startsWith('strata-backend-'))) {
      expect(volumeOf(d).persistentVolumeClaim, d.metadata.name).toBeUndefined();
      expect(volumeOf(d).hostPath?.path).toBe('/mnt/k8s-disks/0/strata-models');
    }
  });
});

describe('other sources and volumes', () => {
  it('renders no init container for a model already in its volume, and mounts its claim read-only', () => {
    const d = backendOf(
      render([
        oneModel({
          volume: { type: 'pvc', claimName: 'weights', accessMode: 'ReadOnlyMany' },
          replicas: 3,
          source: { uri: '' },
        }),
      ]),
      'm',
    );
    expect(podSpec(d).initContainers).toBeUndefined();
    expect(volumeOf(d).persistentVolumeClaim).toEqual({ claimName: 'weights', readOnly: true });
  });

  it('lets several replicas fetch into a ReadWriteMany claim, which the fetcher mounts read-write', () => {
    const d = backendOf(
      render([
        oneModel({ volume: { type: 'pvc', claimName: 'shared', accessMode: 'ReadWriteMany' }, replicas: 2 }),
      ]),
      'm',
    );
    expect(volumeOf(d).persistentVolumeClaim).toEqual({ claimName: 'shared', readOnly: false });
    // A claim gets its ownership from fsGroup: no root init container.
    expect(podSpec(d).initContainers.map((c: { name: string }) => c.name)).toEqual(['fetch-model']);
  });

  it('passes include patterns, the rate cap and a tuned stale-lock time', () => {
    const d = backendOf(
      render([
        oneModel(
          { source: { uri: 'hf://org/model@abc123', include: ['*.safetensors', 'config.json'] } },
          { backend: { fetch: { staleLockSeconds: 30, maxMBPerSecond: 500 } } },
        ),
      ]),
      'm',
    );
    const args = initOf(d, 'fetch-model').args;
    expect(args).toContain('--stale-lock-s=30');
    expect(args).toContain('--max-mb-per-s=500');
    expect(args.filter((a: string) => a.startsWith('--include='))).toEqual([
      '--include=*.safetensors',
      '--include=config.json',
    ]);
    expect(envOf(initOf(d, 'fetch-model')).HF_TOKEN).toBeUndefined();
  });
});

describe('values that must not render', () => {
  it('refuses several replicas on a ReadWriteOnce claim, saying why and what to use instead', () => {
    const r = helmTemplate({
      values: [oneModel({ volume: { type: 'pvc', claimName: 'weights' }, replicas: 2 })],
    });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain(
      'models[m]: up to 2 replicas on the ReadWriteOnce claim "weights": a ReadWriteOnce volume attaches to one node',
    );
    expect(r.stderr).toContain('Use volume.type nodeCache');
  });

  it('counts the replicas KEDA may add', () => {
    const r = helmTemplate({
      values: [
        oneModel({
          volume: { type: 'pvc', claimName: 'weights' },
          replicas: 1,
          autoscaling: { maxReplicas: 4 },
        }),
      ],
      set: ['keda.enabled=true'],
    });
    expect(r.stderr).toContain('models[m]: up to 4 replicas on the ReadWriteOnce claim "weights"');
    // One replica and no autoscaling: a ReadWriteOnce claim is fine.
    expect(
      helmTemplate({ values: [oneModel({ volume: { type: 'pvc', claimName: 'weights' } })] }).status,
    ).toBe(0);
  });

  it('refuses a source that would have to write into a ReadOnlyMany claim', () => {
    const r = helmTemplate({
      values: [oneModel({ volume: { type: 'pvc', claimName: 'ro', accessMode: 'ReadOnlyMany' } })],
    });
    expect(r.stderr).toContain('models[m]: source.uri is set but the claim "ro" is ReadOnlyMany');
  });

  it('refuses source URIs other than s3:// and hf://, and the old download block', () => {
    for (const uri of ['gs://bucket/m', 'https://huggingface.co/org/m', 's3://Bad_Bucket/m', 'hf://a/b/c']) {
      const r = helmTemplate({ values: [oneModel({ source: { uri } })] });
      expect(r.status, uri).not.toBe(0);
      expect(r.stderr, uri).toMatch(/models\/0\/source\/uri/);
    }
    const old = helmTemplate({ values: [oneModel({ download: { enabled: true, repo: 'org/m' } })] });
    expect(old.status).not.toBe(0);
    expect(old.stderr).toMatch(/additional properties 'download' not allowed/);
  });
});

describe('nodes that prepare the cache directory themselves', () => {
  it('drop the root init container: every container runs non-root', () => {
    const d = backendOf(render([oneModel({}, { backend: { modelCache: { prepare: false } } })]), 'm');
    expect(podSpec(d).initContainers.map((c: { name: string }) => c.name)).toEqual(['fetch-model']);
  });
});
