// Model storage on AWS: the GPU nodes' instance-store NVMe as one RAID0 array (the chart's
// node-local model cache lives there), and the backends' IRSA role that reads the model bucket
// and nothing else.
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseInfraConfig } from '../src/config/load.js';
import { validate as checkSchema, crdSchema } from './crd-schema.js';
import { irsaTrust, refOf, releaseValues, synth, trustOf } from './helpers.js';

// Karpenter's own EC2NodeClass CRD for the version the app installs (scripts/ensure-crds.sh).
const nodeClassSchema = crdSchema(
  fileURLToPath(
    new URL(
      '../../.toolchain/k8s-crds/karpenter-v1.14.1/karpenter.k8s.aws_ec2nodeclasses.yaml',
      import.meta.url,
    ),
  ),
  'v1',
).schema;

type Manifest = { kind: string; metadata: { name: string }; spec: Record<string, unknown> };
const nodeClasses = (s: ReturnType<typeof synth>) =>
  (releaseValues(s, 'karpenter-node-pools').manifests as Manifest[]).filter((m) => m.kind === 'EC2NodeClass');

describe('GPU node instance store', () => {
  const s = synth({
    gpuNodeGroups: [
      { name: 'gpu-h100', instanceTypes: ['p5.48xlarge'] },
      { name: 'gpu-l40s', instanceTypes: ['g6e.xlarge'], amiType: 'BOTTLEROCKET_x86_64_NVIDIA' },
    ],
  });

  it('makes the NVMe disks of every GPU class one RAID0 array, and leaves the system class alone', () => {
    const classes = nodeClasses(s);
    expect(Object.fromEntries(classes.map((c) => [c.metadata.name, c.spec.instanceStorePolicy]))).toEqual({
      'gpu-h100': 'RAID0',
      'gpu-l40s': 'RAID0',
      system: undefined,
    });
    for (const c of classes) expect(checkSchema(nodeClassSchema, c), c.metadata.name).toEqual([]);
  });

  it('can be turned off', () => {
    const off = synth({ karpenter: { gpuInstanceStorePolicy: 'none' } });
    expect(nodeClasses(off).map((c) => c.spec.instanceStorePolicy)).toEqual([undefined, undefined]);
  });
});

describe('the model-reader IRSA role', () => {
  const s = synth({
    clusterName: 'strata-prod',
    irsa: { modelReader: { enabled: true, bucket: 'strata-models-prod', prefix: 'models/' } },
  });

  it("is bound to the chart's backend service account only", () => {
    expect(trustOf(s, 'strata-prod-model-reader').statements).toEqual(
      irsaTrust(s, 'strata', 'strata-backend'),
    );
  });

  it('may list the model prefix and read its objects in that one bucket, nothing more', () => {
    const inline = s.one('aws_iam_role_policy', 'name', 'strata-prod-model-reader');
    expect(JSON.parse(String(inline.policy))).toEqual({
      Version: '2012-10-17',
      Statement: [
        {
          Sid: 'ListModelBucket',
          Effect: 'Allow',
          Action: ['s3:ListBucket'],
          Resource: 'arn:aws:s3:::strata-models-prod',
          Condition: { StringLike: { 's3:prefix': ['models/*'] } },
        },
        {
          Sid: 'ReadModels',
          Effect: 'Allow',
          Action: ['s3:GetObject'],
          Resource: 'arn:aws:s3:::strata-models-prod/models/*',
        },
      ],
    });
    // No managed policy rides along (the EBS CSI role, for contrast, has its one attachment).
    const attachedTo = (roleName: string) => {
      const ref = refOf(s, 'aws_iam_role', s.one('aws_iam_role', 'name', roleName));
      return s.all('aws_iam_role_policy_attachment').filter((a) => a.role === `\${${ref}.name}`);
    };
    expect(attachedTo('strata-prod-ebs-csi')).toHaveLength(1);
    const attached = attachedTo('strata-prod-model-reader');
    expect(attached).toEqual([]);
  });

  it('outputs the ARN for backend.serviceAccountAnnotations', () => {
    expect(s.output.irsa_model_reader_role_arn?.description).toBe('IRSA role for strata/strata-backend');
  });

  it('reads the whole bucket without a prefix; needs a bucket; is off by default', () => {
    const whole = synth({ irsa: { modelReader: { enabled: true, bucket: 'models-bucket' } } });
    const policy = JSON.parse(String(whole.one('aws_iam_role_policy', 'name', 'strata-model-reader').policy));
    expect(policy.Statement[0].Condition).toBeUndefined();
    expect(policy.Statement[1].Resource).toBe('arn:aws:s3:::models-bucket/*');
    expect(() => parseInfraConfig({ irsa: { modelReader: { enabled: true } } })).toThrow(
      /irsa\.modelReader\.bucket.*the model bucket is required/,
    );
    expect(() =>
      parseInfraConfig({ irsa: { modelReader: { enabled: true, bucket: 'b', prefix: '/x' } } }),
    ).toThrow(/must be an S3 bucket name|must be empty or a key prefix/);
    expect(synth().output.irsa_model_reader_role_arn).toBeUndefined();
  });
});
