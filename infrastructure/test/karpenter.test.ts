import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { validate as checkSchema, crdSchema, type Schema } from './crd-schema.js';
import { irsaTrust, refOf, releaseValues, type Synthesized, synth, trustOf } from './helpers.js';

type Manifest = {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
  spec: Record<string, unknown>;
};
interface Taint {
  key: string;
  value?: string;
  effect: string;
}
interface Toleration {
  key?: string;
  operator?: string;
  value?: string;
  effect?: string;
}
interface NodePoolSpec {
  template: {
    metadata: { labels: Record<string, string> };
    spec: {
      nodeClassRef: { group: string; kind: string; name: string };
      requirements: { key: string; operator: string; values: string[] }[];
      taints?: Taint[];
      expireAfter: string;
    };
  };
  disruption: { consolidationPolicy: string; consolidateAfter: string; budgets?: { nodes: string }[] };
  limits: Record<string, number>;
}
interface NodeClassSpec {
  amiSelectorTerms: { alias: string }[];
  instanceProfile: string;
  subnetSelectorTerms: { tags: Record<string, string> }[];
  securityGroupSelectorTerms: { tags: Record<string, string> }[];
  blockDeviceMappings: { deviceName: string; ebs: Record<string, unknown> }[];
  metadataOptions: Record<string, unknown>;
  tags: Record<string, string>;
}

// Karpenter's own CRDs for the version the app installs, from its Go module
// (scripts/ensure-crds.sh, run by `pnpm test`, puts them in .toolchain/k8s-crds).
const KARPENTER = 'v1.14.1';
const fixture = (file: string) =>
  fileURLToPath(new URL(`../../.toolchain/k8s-crds/karpenter-${KARPENTER}/${file}`, import.meta.url));
const CRDS: Record<string, { apiVersion: string; schema: Schema }> = {
  NodePool: {
    apiVersion: 'karpenter.sh/v1',
    schema: crdSchema(fixture('karpenter.sh_nodepools.yaml'), 'v1').schema,
  },
  EC2NodeClass: {
    apiVersion: 'karpenter.k8s.aws/v1',
    schema: crdSchema(fixture('karpenter.k8s.aws_ec2nodeclasses.yaml'), 'v1').schema,
  },
};

function validateManifest(m: Manifest): string[] {
  const crd = CRDS[m.kind];
  if (!crd) return [`${m.kind}: no CRD for this kind`];
  if (m.apiVersion !== crd.apiVersion)
    return [`${m.kind}: apiVersion ${m.apiVersion}, CRD serves ${crd.apiVersion}`];
  return checkSchema(crd.schema, m).map((p) => `${m.kind}/${m.metadata.name}: ${p}`);
}

const manifestsOf = (s: Synthesized) => releaseValues(s, 'karpenter-node-pools').manifests as Manifest[];
const poolOf = (s: Synthesized, name: string) => {
  const m = manifestsOf(s).find((x) => x.kind === 'NodePool' && x.metadata.name === name);
  if (!m) throw new Error(`no NodePool ${name}`);
  return m.spec as unknown as NodePoolSpec;
};
const classOf = (s: Synthesized, name: string) => {
  const m = manifestsOf(s).find((x) => x.kind === 'EC2NodeClass' && x.metadata.name === name);
  if (!m) throw new Error(`no EC2NodeClass ${name}`);
  return m.spec as unknown as NodeClassSpec;
};

/** Kubernetes' toleration semantics (k8s.io/api/core/v1 Toleration.ToleratesTaint). */
function tolerates(t: Toleration, taint: Taint): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (t.operator === 'Exists') return !t.key || t.key === taint.key;
  return t.key === taint.key && (t.value ?? '') === (taint.value ?? '');
}

/** Whether a pod with this nodeSelector and these tolerations may run on the pool's nodes. */
function fits(
  pod: { nodeSelector: Record<string, string>; tolerations: Toleration[] },
  pool: NodePoolSpec,
): boolean {
  const labels = pool.template.metadata.labels;
  const selected = Object.entries(pod.nodeSelector).every(([k, v]) => labels[k] === v);
  const tolerated = (pool.template.spec.taints ?? []).every((taint) =>
    pod.tolerations.some((t) => tolerates(t, taint)),
  );
  return selected && tolerated;
}

describe('Karpenter: AWS side', () => {
  const s = synth({ clusterName: 'strata-prod', region: 'us-east-1' });
  const cluster = s.all('aws_eks_cluster')[0] as Record<string, unknown>;
  const clusterRef = refOf(s, 'aws_eks_cluster', cluster);
  const nodeRole = s.one('aws_iam_role', 'name', 'strata-prod-karpenter-node');
  const nodeRoleRef = refOf(s, 'aws_iam_role', nodeRole);
  const queue = s.one('aws_sqs_queue', 'name', 'strata-prod-karpenter');
  const queueRef = refOf(s, 'aws_sqs_queue', queue);
  const profile = s.one('aws_iam_instance_profile', 'name', 'strata-prod-karpenter-node');
  const profileRef = refOf(s, 'aws_iam_instance_profile', profile);
  const controllerPolicy = JSON.parse(
    String(s.one('aws_iam_role_policy', 'name', 'strata-prod-karpenter').policy),
  ) as { Statement: { Sid: string; Action: string[]; Resource: string | string[]; Condition?: unknown }[] };
  const statement = (sid: string) => {
    const st = controllerPolicy.Statement.find((x) => x.Sid === sid);
    if (!st) throw new Error(`no statement ${sid}`);
    return st;
  };

  it('gives nodes an EC2 role with the worker policies, an instance profile and an EKS access entry', () => {
    expect(JSON.parse(String(nodeRole.assume_role_policy))).toEqual({
      Version: '2012-10-17',
      Statement: [{ Effect: 'Allow', Principal: { Service: 'ec2.amazonaws.com' }, Action: 'sts:AssumeRole' }],
    });
    const attached = s
      .all('aws_iam_role_policy_attachment')
      .filter((a) => a.role === `\${${nodeRoleRef}.name}`)
      .map((a) => String(a.policy_arn).split('/').pop())
      .sort();
    expect(attached).toEqual([
      'AmazonEC2ContainerRegistryPullOnly',
      'AmazonEKSWorkerNodePolicy',
      'AmazonEKS_CNI_Policy',
      'AmazonSSMManagedInstanceCore',
    ]);
    expect(profile.role).toBe(`\${${nodeRoleRef}.name}`);
    expect(s.all('aws_eks_access_entry')).toEqual([
      expect.objectContaining({
        cluster_name: `\${${clusterRef}.name}`,
        principal_arn: `\${${nodeRoleRef}.arn}`,
        type: 'EC2_LINUX',
      }),
    ]);
  });

  it('feeds spot interruption, rebalance, state-change, health and capacity-reservation events to an SQS queue', () => {
    expect(queue).toMatchObject({ message_retention_seconds: 300, sqs_managed_sse_enabled: true });
    const patterns = s
      .all('aws_cloudwatch_event_rule')
      .map((r) => JSON.parse(String(r.event_pattern)) as { source: string[]; 'detail-type': string[] });
    expect(patterns.map((p) => `${p.source[0]}: ${p['detail-type'][0]}`).sort()).toEqual([
      'aws.ec2: EC2 Capacity Reservation Instance Interruption Warning',
      'aws.ec2: EC2 Instance Rebalance Recommendation',
      'aws.ec2: EC2 Instance State-change Notification',
      'aws.ec2: EC2 Spot Instance Interruption Warning',
      'aws.health: AWS Health Event',
    ]);
    for (const rule of s.all('aws_cloudwatch_event_rule')) {
      expect(String(rule.name).length).toBeLessThanOrEqual(64);
      const target = s.one(
        'aws_cloudwatch_event_target',
        'rule',
        `\${${refOf(s, 'aws_cloudwatch_event_rule', rule)}.name}`,
      );
      expect(target.arn).toBe(`\${${queueRef}.arn}`);
    }
    const queuePolicy = s.all('aws_sqs_queue_policy')[0] as Record<string, unknown>;
    expect(queuePolicy.queue_url).toBe(`\${${queueRef}.url}`);
    const statements = (JSON.parse(String(queuePolicy.policy)) as { Statement: Record<string, unknown>[] })
      .Statement;
    expect(statements).toEqual([
      expect.objectContaining({
        Effect: 'Allow',
        Principal: { Service: ['events.amazonaws.com', 'sqs.amazonaws.com'] },
        Action: 'sqs:SendMessage',
        Resource: `\${${queueRef}.arn}`,
      }),
      expect.objectContaining({
        Effect: 'Deny',
        Action: 'sqs:*',
        Condition: { Bool: { 'aws:SecureTransport': 'false' } },
      }),
    ]);
  });

  it('tags the private subnets and the cluster security group for discovery, and not the public subnets', () => {
    const subnets = s.all('aws_subnet').map((x) => x.tags as Record<string, string>);
    const tagged = subnets.filter((t) => t['karpenter.sh/discovery'] === 'strata-prod').map((t) => t.Name);
    expect(tagged.sort()).toEqual([
      'strata-prod-private-us-east-1a',
      'strata-prod-private-us-east-1b',
      'strata-prod-private-us-east-1c',
    ]);
    expect(s.all('aws_ec2_tag')).toEqual([
      expect.objectContaining({
        resource_id: `\${${clusterRef}.vpc_config[0].cluster_security_group_id}`,
        key: 'karpenter.sh/discovery',
        value: 'strata-prod',
      }),
    ]);
  });

  it('has a controller role only kube-system/karpenter can assume, through the OIDC provider', () => {
    expect(trustOf(s, 'strata-prod-karpenter').statements).toEqual(irsaTrust(s, 'kube-system', 'karpenter'));
  });

  it('lets the controller launch, tag and terminate only what it owns in this cluster and region', () => {
    expect(controllerPolicy.Statement.map((st) => st.Sid)).toEqual([
      'AllowScopedEC2InstanceAccessActions',
      'AllowScopedEC2LaunchTemplateAccessActions',
      'AllowScopedEC2InstanceActionsWithTags',
      'AllowScopedResourceCreationTagging',
      'AllowScopedResourceTagging',
      'AllowScopedDeletion',
      'AllowPassingInstanceRole',
      'AllowAPIServerEndpointDiscovery',
      'AllowInterruptionQueueActions',
      'AllowRegionalReadActions',
      'AllowSSMReadActions',
      'AllowPricingReadActions',
      'AllowUnscopedInstanceProfileListAction',
      'AllowInstanceProfileReadActions',
    ]);
    expect(statement('AllowScopedEC2InstanceActionsWithTags').Condition).toEqual({
      StringEquals: {
        'aws:RequestTag/kubernetes.io/cluster/strata-prod': 'owned',
        'aws:RequestTag/eks:eks-cluster-name': 'strata-prod',
      },
      StringLike: { 'aws:RequestTag/karpenter.sh/nodepool': '*' },
    });
    expect(statement('AllowScopedDeletion')).toMatchObject({
      Action: ['ec2:TerminateInstances', 'ec2:DeleteLaunchTemplate'],
      Resource: ['arn:aws:ec2:us-east-1:*:instance/*', 'arn:aws:ec2:us-east-1:*:launch-template/*'],
      Condition: {
        StringEquals: { 'aws:ResourceTag/kubernetes.io/cluster/strata-prod': 'owned' },
        StringLike: { 'aws:ResourceTag/karpenter.sh/nodepool': '*' },
      },
    });
    expect(statement('AllowPassingInstanceRole').Resource).toBe(`\${${nodeRoleRef}.arn}`);
    expect(statement('AllowAPIServerEndpointDiscovery').Resource).toBe(`\${${clusterRef}.arn}`);
    expect(statement('AllowInterruptionQueueActions').Resource).toBe(`\${${queueRef}.arn}`);
    expect(statement('AllowInstanceProfileReadActions').Resource).toBe(`\${${profileRef}.arn}`);
    expect(statement('AllowRegionalReadActions').Condition).toEqual({
      StringEquals: { 'aws:RequestedRegion': 'us-east-1' },
    });
    // Unscoped resources only for reads.
    for (const st of controllerPolicy.Statement.filter((x) => x.Resource === '*')) {
      for (const action of st.Action) expect(action).toMatch(/^(ec2:Describe|pricing:Get|iam:List)/);
    }
    // Terraform owns the instance profile: the controller cannot create or change any.
    const actions = controllerPolicy.Statement.flatMap((st) => st.Action);
    for (const forbidden of [
      'iam:CreateInstanceProfile',
      'iam:AddRoleToInstanceProfile',
      'iam:DeleteInstanceProfile',
    ]) {
      expect(actions).not.toContain(forbidden);
    }
  });

  it('keeps the controller policy within IAM limits once references resolve to real ARNs', () => {
    const policy = String(s.one('aws_iam_role_policy', 'name', 'strata-prod-karpenter').policy);
    const resolved = policy.replace(/\$\{[^}]+\}/g, 'x'.repeat(120)); // longer than any of these ARNs
    expect(resolved.length).toBeLessThan(10_240);
  });

  it('outputs the node role, the queue and the NodePools', () => {
    expect(s.output.karpenter_node_role_arn?.value).toBe(`\${${nodeRoleRef}.arn}`);
    expect(s.output.karpenter_interruption_queue?.value).toBe(`\${${queueRef}.name}`);
    expect(s.output.karpenter_node_pools?.value).toEqual(['gpu-a10g', 'system']);
  });
});

describe('Karpenter: Helm releases', () => {
  const s = synth();
  const release = (name: string) => s.one('helm_release', 'name', name);
  const ref = (name: string) => refOf(s, 'helm_release', release(name));
  const cluster = s.all('aws_eks_cluster')[0] as Record<string, unknown>;
  const clusterRef = refOf(s, 'aws_eks_cluster', cluster);

  it('installs the CRD chart and the controller chart from public ECR at the same pinned version', () => {
    for (const chart of ['karpenter-crd', 'karpenter']) {
      expect(release(chart)).toMatchObject({
        repository: 'oci://public.ecr.aws/karpenter',
        chart,
        version: '1.14.1',
        namespace: 'kube-system',
        provider: 'helm',
      });
    }
    // The CRDs belong to karpenter-crd, which Helm upgrades; the controller chart's copy is skipped.
    expect(release('karpenter').skip_crds).toBe(true);
    expect(release('karpenter-crd').skip_crds).toBeUndefined();
  });

  it('configures the controller with the cluster, its endpoint, the queue and its IRSA role', () => {
    const values = releaseValues(s, 'karpenter') as {
      settings: Record<string, string>;
      serviceAccount: Record<string, unknown>;
      affinity: {
        nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: unknown[] } };
      };
    };
    const queueRef = refOf(s, 'aws_sqs_queue', s.all('aws_sqs_queue')[0] as Record<string, unknown>);
    expect(values.settings).toEqual({
      clusterName: `\${${clusterRef}.name}`,
      clusterEndpoint: `\${${clusterRef}.endpoint}`,
      interruptionQueue: `\${${queueRef}.name}`,
    });
    const role = s.one('aws_iam_role', 'name', 'strata-karpenter');
    expect(values.serviceAccount).toEqual({
      create: true,
      name: 'karpenter',
      annotations: { 'eks.amazonaws.com/role-arn': `\${${refOf(s, 'aws_iam_role', role)}.arn}` },
    });
    // Only on the managed system group: never on a node it could consolidate away.
    const system = s.one('aws_eks_node_group', 'node_group_name', 'system');
    expect(
      values.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms,
    ).toEqual([
      {
        matchExpressions: [
          { key: 'karpenter.sh/nodepool', operator: 'DoesNotExist' },
          {
            key: 'eks.amazonaws.com/nodegroup',
            operator: 'In',
            values: [`\${${refOf(s, 'aws_eks_node_group', system)}.node_group_name}`],
          },
        ],
      },
    ]);
  });

  it('orders CRDs -> controller (with node access and permissions) -> NodePools', () => {
    const coredns = refOf(s, 'aws_eks_addon', s.one('aws_eks_addon', 'addon_name', 'coredns'));
    expect(release('karpenter-crd').depends_on).toContain(coredns);
    const controllerDeps = release('karpenter').depends_on as string[];
    expect(controllerDeps).toContain(ref('karpenter-crd'));
    expect(controllerDeps).toContain(coredns);
    expect(controllerDeps).toContain(
      refOf(s, 'aws_eks_access_entry', s.all('aws_eks_access_entry')[0] as Record<string, unknown>),
    );
    expect(controllerDeps).toContain(
      refOf(s, 'aws_iam_role_policy', s.one('aws_iam_role_policy', 'name', 'strata-karpenter')),
    );
    expect(release('karpenter-node-pools').depends_on).toEqual([ref('karpenter')]);
  });

  it('applies the NodePools with the local chart copied next to the synthesized JSON', () => {
    const chart = String(release('karpenter-node-pools').chart);
    expect(chart).toMatch(/^\.\/assets\/karpenter_node-pools-chart_[0-9A-F]+\/[0-9A-F]+$/);
    const template = readFileSync(
      new URL('../charts/karpenter-node-pools/templates/manifests.yaml', import.meta.url),
      'utf8',
    );
    expect(template).toContain('{{- range .Values.manifests }}');
  });
});

describe('Karpenter: NodePools and EC2NodeClasses', () => {
  const s = synth({
    tags: { project: 'strata', environment: 'test' },
    karpenter: { amiVersions: { al2023: 'v20240807' }, gpuConsolidateAfter: '20m' },
    gpuNodeGroups: [
      { name: 'a10g', instanceTypes: ['g5.2xlarge', 'g5.4xlarge'], minSize: 0, maxSize: 4, desiredSize: 1 },
      {
        name: 'h100',
        instanceTypes: ['p5.48xlarge'],
        maxSize: 2,
        desiredSize: 0,
        capacityType: 'SPOT',
        amiType: 'BOTTLEROCKET_x86_64_NVIDIA',
        diskSizeGiB: 500,
        karpenterMaxNodes: 1,
        labels: { 'strata.dev/tier': 'large-models' },
      },
      { name: 'l4', instanceTypes: ['g6.xlarge'], karpenterMaxNodes: 0 },
    ],
  });
  const manifests = manifestsOf(s);
  const profileRef = refOf(
    s,
    'aws_iam_instance_profile',
    s.all('aws_iam_instance_profile')[0] as Record<string, unknown>,
  );

  it("conform to Karpenter v1.14.1's CRD schemas", () => {
    expect(manifests.flatMap(validateManifest)).toEqual([]);
    expect(manifests.map((m) => `${m.kind}/${m.metadata.name}`)).toEqual([
      'EC2NodeClass/a10g',
      'NodePool/a10g',
      'EC2NodeClass/h100',
      'NodePool/h100',
      'EC2NodeClass/system',
      'NodePool/system',
    ]);
  });

  it('are checked strictly: a misspelt field, a bad enum or a missing reference is reported', () => {
    const pool = structuredClone(manifests[1] as Manifest);
    const spec = pool.spec as unknown as NodePoolSpec & { disruption: Record<string, unknown> };
    spec.disruption.consolidateAfterr = '1m';
    spec.disruption.consolidationPolicy = 'WhenIdle';
    const { name: _, ...unnamed } = spec.template.spec.nodeClassRef;
    (spec.template.spec as Record<string, unknown>).nodeClassRef = unnamed;
    spec.template.spec.taints = [{ key: 'nvidia.com/gpu', value: 'true', effect: 'NO_SCHEDULE' }];
    expect(validateManifest(pool).sort()).toEqual([
      'NodePool/a10g: spec.disruption.consolidateAfterr: unknown field',
      'NodePool/a10g: spec.disruption.consolidationPolicy: "WhenIdle" is not one of ["WhenEmpty","WhenEmptyOrUnderutilized","Balanced"]',
      'NodePool/a10g: spec.template.spec.nodeClassRef: missing required field "name"',
      'NodePool/a10g: spec.template.spec.taints[0].effect: "NO_SCHEDULE" is not one of ["NoSchedule","PreferNoSchedule","NoExecute"]',
    ]);
    const nodeClass = structuredClone(manifests[0] as Manifest);
    const { instanceProfile, ...rest } = nodeClass.spec as unknown as NodeClassSpec;
    nodeClass.spec = { ...rest, instanceProfil: instanceProfile };
    (
      (nodeClass.spec.blockDeviceMappings as NodeClassSpec['blockDeviceMappings'])[0] as {
        ebs: Record<string, unknown>;
      }
    ).ebs.volumeType = 'gp4';
    expect(validateManifest(nodeClass)).toEqual([
      'EC2NodeClass/a10g: spec.blockDeviceMappings[0].ebs.volumeType: "gp4" is not one of ["standard","io1","io2","gp2","sc1","st1","gp3"]',
      'EC2NodeClass/a10g: spec.instanceProfil: unknown field',
    ]);
  });

  it('give each GPU pool exactly its group’s instance types, capacity type, labels and taint', () => {
    const a10g = poolOf(s, 'a10g');
    expect(a10g.template.spec.requirements).toEqual([
      { key: 'node.kubernetes.io/instance-type', operator: 'In', values: ['g5.2xlarge', 'g5.4xlarge'] },
      { key: 'karpenter.sh/capacity-type', operator: 'In', values: ['on-demand'] },
      { key: 'kubernetes.io/arch', operator: 'In', values: ['amd64'] },
      { key: 'kubernetes.io/os', operator: 'In', values: ['linux'] },
    ]);
    expect(poolOf(s, 'h100').template.spec.requirements[1]).toEqual({
      key: 'karpenter.sh/capacity-type',
      operator: 'In',
      values: ['spot'],
    });
    for (const name of ['a10g', 'h100']) {
      const pool = poolOf(s, name);
      expect(pool.template.spec.nodeClassRef).toEqual({
        group: 'karpenter.k8s.aws',
        kind: 'EC2NodeClass',
        name,
      });
      expect(pool.template.spec.taints).toEqual([
        { key: 'nvidia.com/gpu', value: 'true', effect: 'NoSchedule' },
      ]);
      // A node from the pool carries the same labels as one from the managed group.
      expect(pool.template.metadata.labels).toEqual(
        s.one('aws_eks_node_group', 'node_group_name', name).labels,
      );
    }
    expect(poolOf(s, 'h100').template.metadata.labels).toMatchObject({
      'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3',
      'nvidia.com/gpu.count': '8',
      'strata.dev/gpu-ami': 'bottlerocket',
      'strata.dev/tier': 'large-models',
    });
  });

  it('use no label Karpenter reserves or rejects', () => {
    for (const m of manifests.filter((x) => x.kind === 'NodePool')) {
      for (const key of Object.keys((m.spec as unknown as NodePoolSpec).template.metadata.labels)) {
        const domain = key.includes('/') ? (key.split('/')[0] as string) : '';
        expect(domain).not.toMatch(/(^|\.)(kubernetes\.io|k8s\.io|karpenter\.sh|karpenter\.k8s\.aws)$/);
      }
    }
  });

  it('cap GPUs per pool at karpenterMaxNodes (default maxSize) times GPUs per node, and skip pools set to 0', () => {
    expect(poolOf(s, 'a10g').limits).toEqual({ 'nvidia.com/gpu': 4 });
    expect(poolOf(s, 'h100').limits).toEqual({ 'nvidia.com/gpu': 8 });
    expect(manifests.some((m) => m.metadata.name === 'l4')).toBe(false);
    expect(s.one('aws_eks_node_group', 'node_group_name', 'l4')).toBeDefined();
  });

  it('consolidate GPU nodes after the configured wait, one node at a time, and expire them after 30 days', () => {
    for (const name of ['a10g', 'h100']) {
      const pool = poolOf(s, name);
      expect(pool.disruption).toEqual({
        consolidationPolicy: 'WhenEmptyOrUnderutilized',
        consolidateAfter: '20m',
        budgets: [{ nodes: '1' }],
      });
      expect(pool.template.spec.expireAfter).toBe('720h');
    }
  });

  it('launch GPU nodes on the EKS-optimized AMI of the group, in the tagged subnets and security group', () => {
    const a10g = classOf(s, 'a10g');
    expect(a10g.amiSelectorTerms).toEqual([{ alias: 'al2023@v20240807' }]);
    expect(a10g.instanceProfile).toBe(`\${${profileRef}.name}`);
    expect(a10g.subnetSelectorTerms).toEqual([{ tags: { 'karpenter.sh/discovery': 'strata' } }]);
    expect(a10g.securityGroupSelectorTerms).toEqual([{ tags: { 'karpenter.sh/discovery': 'strata' } }]);
    expect(a10g.blockDeviceMappings).toEqual([
      {
        deviceName: '/dev/xvda',
        ebs: { volumeSize: '200Gi', volumeType: 'gp3', encrypted: true, deleteOnTermination: true },
      },
    ]);
    expect(a10g.metadataOptions).toMatchObject({ httpTokens: 'required', httpPutResponseHopLimit: 1 });
    expect(a10g.tags).toEqual({ project: 'strata', environment: 'test' });
    // Bottlerocket: OS volume plus the data volume sized like the managed group's disk.
    const h100 = classOf(s, 'h100');
    expect(h100.amiSelectorTerms).toEqual([{ alias: 'bottlerocket@latest' }]);
    expect(h100.blockDeviceMappings.map((b) => `${b.deviceName} ${b.ebs.volumeSize}`)).toEqual([
      '/dev/xvda 4Gi',
      '/dev/xvdb 500Gi',
    ]);
  });

  it('add an untainted system pool of current c/m/r on-demand instances on the system group’s architecture', () => {
    const system = poolOf(s, 'system');
    expect(system.template.metadata.labels).toEqual({ 'strata.dev/node-role': 'system' });
    expect(system.template.spec.taints).toBeUndefined();
    expect(system.template.spec.requirements).toEqual([
      { key: 'karpenter.k8s.aws/instance-category', operator: 'In', values: ['c', 'm', 'r'] },
      { key: 'karpenter.k8s.aws/instance-generation', operator: 'Gt', values: ['5'] },
      { key: 'karpenter.sh/capacity-type', operator: 'In', values: ['on-demand'] },
      { key: 'kubernetes.io/arch', operator: 'In', values: ['amd64'] },
      { key: 'kubernetes.io/os', operator: 'In', values: ['linux'] },
    ]);
    expect(system.limits).toEqual({ cpu: 64 });
    expect(system.disruption).toEqual({
      consolidationPolicy: 'WhenEmptyOrUnderutilized',
      consolidateAfter: '5m',
    });
    expect(classOf(s, 'system').blockDeviceMappings[0]?.ebs.volumeSize).toBe('50Gi');

    const arm = synth({
      systemNodeGroup: { instanceTypes: ['m7g.large'], amiType: 'AL2023_ARM_64_STANDARD' },
      karpenter: { systemPool: { maxCpu: 16 } },
    });
    expect(poolOf(arm, 'system').template.spec.requirements).toContainEqual({
      key: 'kubernetes.io/arch',
      operator: 'In',
      values: ['arm64'],
    });
    expect(poolOf(arm, 'system').limits).toEqual({ cpu: 16 });
  });
});

describe('Karpenter and the Strata chart', () => {
  const chart = (file: string) =>
    parse(readFileSync(new URL(`../../helm/strata/${file}`, import.meta.url), 'utf8')) as {
      backend?: { nodeSelector?: Record<string, string>; tolerations?: Toleration[] };
      models?: { name: string; nodeSelector?: Record<string, string>; tolerations?: Toleration[] }[];
    };
  const defaults = chart('values.yaml');
  const production = chart('ci/production-values.yaml');
  const backend = {
    nodeSelector: defaults.backend?.nodeSelector ?? {},
    tolerations: defaults.backend?.tolerations ?? [],
  };

  it("lets the chart's default backend onto the default GPU pool, and keeps it off the system pool", () => {
    expect(backend.nodeSelector).toEqual({ 'strata.dev/node-role': 'gpu' });
    const s = synth();
    expect(fits(backend, poolOf(s, 'gpu-a10g'))).toBe(true);
    expect(fits(backend, poolOf(s, 'system'))).toBe(false);
    // Other pods (no GPU toleration) stay off the GPU pool.
    expect(fits({ nodeSelector: {}, tolerations: [] }, poolOf(s, 'gpu-a10g'))).toBe(false);
    expect(fits({ nodeSelector: {}, tolerations: [] }, poolOf(s, 'system'))).toBe(true);
  });

  it('has a pool from the production example config for every model of the production values', () => {
    const doc = parse(readFileSync(new URL('../config/production.example.yaml', import.meta.url), 'utf8'));
    const s = synth(doc);
    const gpuPools = manifestsOf(s)
      .filter((m) => m.kind === 'NodePool' && m.metadata.name !== 'system')
      .map((m) => ({ name: m.metadata.name, spec: m.spec as unknown as NodePoolSpec }));
    const placements = (production.models ?? []).map((m) => {
      const pod = {
        nodeSelector: m.nodeSelector ?? production.backend?.nodeSelector ?? backend.nodeSelector,
        tolerations: m.tolerations ?? production.backend?.tolerations ?? backend.tolerations,
      };
      return `${m.name} -> ${gpuPools
        .filter((p) => fits(pod, p.spec))
        .map((p) => p.name)
        .join(',')}`;
    });
    expect(placements).toEqual(['llama-3-8b -> h100', 'mistral-7b -> l40s']);
  });
});

describe('Karpenter switched off', () => {
  it('leaves out its AWS resources, releases, discovery tags and outputs', () => {
    const s = synth({ karpenter: { enabled: false } });
    for (const type of [
      'aws_sqs_queue',
      'aws_cloudwatch_event_rule',
      'aws_eks_access_entry',
      'aws_ec2_tag',
    ]) {
      expect(s.all(type)).toEqual([]);
    }
    expect(s.all('aws_iam_role').map((r) => r.name)).not.toContain('strata-karpenter');
    expect(
      s
        .all('helm_release')
        .map((r) => r.name)
        .sort(),
    ).toEqual(['aws-load-balancer-controller', 'nvidia-device-plugin']);
    for (const subnet of s.all('aws_subnet'))
      expect(subnet.tags).not.toHaveProperty(['karpenter.sh/discovery']);
    expect(s.output.karpenter_node_pools).toBeUndefined();
  });

  it('installs the controller without a NodePool release when no pool is wanted', () => {
    const s = synth({
      gpuNodeGroups: [{ name: 'l4', instanceTypes: ['g6.xlarge'], karpenterMaxNodes: 0 }],
      karpenter: { systemPool: { enabled: false } },
    });
    const names = s.all('helm_release').map((r) => r.name);
    expect(names).toContain('karpenter');
    expect(names).not.toContain('karpenter-node-pools');
  });
});

describe('the CRDs the manifests are checked against', () => {
  it('are those of the Karpenter version the app installs', () => {
    const s = synth({ clusterName: 'strata-prod', region: 'us-east-1' });
    expect(`v${String(s.one('helm_release', 'name', 'karpenter').version)}`).toBe(KARPENTER);
    const script = readFileSync(new URL('../scripts/ensure-crds.sh', import.meta.url), 'utf8');
    expect(script).toContain(`KARPENTER_VERSION=${KARPENTER} `);
  });
});
