// Karpenter's NodePools (karpenter.sh/v1) and EC2NodeClasses (karpenter.k8s.aws/v1) as plain
// objects; the stack applies them through a Helm release. One pair per GPU node group, with the
// group's instance types, capacity type, disk, labels and taint, so a node Karpenter adds is
// indistinguishable to the chart from a managed-group node; plus an optional untainted system pair.
import { GPU_TAINT, gpuNodeLabels, LABELS } from '../cluster/node-groups.js';
import { describeGpuInstance, type GpuInstance } from '../config/gpu-instances.js';
import type { GpuNodeGroupConfig, InfraConfig, SystemNodeGroupConfig } from '../config/schema.js';

/** Tag on the private subnets and the cluster security group; EC2NodeClasses select on it. */
export const DISCOVERY_TAG = 'karpenter.sh/discovery';

/** Cap on voluntary disruption (consolidation, drift, expiry) of GPU nodes: one at a time. */
export const GPU_DISRUPTION_BUDGET = '1';
/** Nodes are replaced after this long (security patches); Karpenter's default, stated. */
export const NODE_EXPIRY = '720h';

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
  spec: Record<string, unknown>;
}

export interface NodeClassContext {
  clusterName: string;
  /** Name of the instance profile (with the Karpenter node role) the nodes launch with. */
  instanceProfile: string;
  /** Tags for the instances, volumes and launch templates (provider default tags do not reach them). */
  tags: Record<string, string>;
  amiVersions: InfraConfig['karpenter']['amiVersions'];
  /** RAID0: the instance-store NVMe disks as one array for the kubelet, containerd and the model cache. */
  instanceStorePolicy?: 'RAID0' | undefined;
}

type AmiType = GpuNodeGroupConfig['amiType'] | SystemNodeGroupConfig['amiType'];

function amiFamily(amiType: AmiType): 'al2023' | 'bottlerocket' {
  return amiType.startsWith('BOTTLEROCKET') ? 'bottlerocket' : 'al2023';
}

function architecture(amiType: AmiType): 'amd64' | 'arm64' {
  return amiType.includes('ARM_64') ? 'arm64' : 'amd64';
}

/** EKS taint effects (NO_SCHEDULE) to Kubernetes ones (NoSchedule). */
const K8S_EFFECT = {
  NO_SCHEDULE: 'NoSchedule',
  NO_EXECUTE: 'NoExecute',
  PREFER_NO_SCHEDULE: 'PreferNoSchedule',
};
export const GPU_TAINT_K8S = {
  key: GPU_TAINT.key,
  value: GPU_TAINT.value,
  effect: K8S_EFFECT[GPU_TAINT.effect],
};

/**
 * An EC2NodeClass on the EKS-optimized AMI of the group's family: with an alias, Karpenter picks
 * the NVIDIA variant (AL2023 NVIDIA, Bottlerocket aws-k8s-*-nvidia) for GPU instance types itself.
 */
export function ec2NodeClass(
  name: string,
  amiType: AmiType,
  diskSizeGiB: number,
  ctx: NodeClassContext,
): Manifest {
  const family = amiFamily(amiType);
  const volume = (sizeGiB: number) => ({
    volumeSize: `${sizeGiB}Gi`,
    volumeType: 'gp3',
    encrypted: true,
    deleteOnTermination: true,
  });
  // Bottlerocket keeps the OS on a small volume and images and logs on the second one, which is
  // the one the managed group's disk size applies to.
  const blockDeviceMappings =
    family === 'bottlerocket'
      ? [
          { deviceName: '/dev/xvda', ebs: volume(4) },
          { deviceName: '/dev/xvdb', ebs: volume(diskSizeGiB) },
        ]
      : [{ deviceName: '/dev/xvda', ebs: volume(diskSizeGiB) }];
  const discovery = [{ tags: { [DISCOVERY_TAG]: ctx.clusterName } }];
  return {
    apiVersion: 'karpenter.k8s.aws/v1',
    kind: 'EC2NodeClass',
    metadata: { name },
    spec: {
      amiSelectorTerms: [{ alias: `${family}@${ctx.amiVersions[family]}` }],
      instanceProfile: ctx.instanceProfile,
      subnetSelectorTerms: discovery,
      securityGroupSelectorTerms: discovery,
      blockDeviceMappings,
      ...(ctx.instanceStorePolicy ? { instanceStorePolicy: ctx.instanceStorePolicy } : {}),
      // IMDSv2 only, and out of reach of pods (hop limit 1): pods get AWS access through IRSA.
      metadataOptions: {
        httpEndpoint: 'enabled',
        httpProtocolIPv6: 'disabled',
        httpPutResponseHopLimit: 1,
        httpTokens: 'required',
      },
      tags: ctx.tags,
    },
  };
}

const requirement = (key: string, operator: 'In' | 'Gt', values: string[]) => ({ key, operator, values });
const nodeClassRef = (name: string) => ({ group: 'karpenter.k8s.aws', kind: 'EC2NodeClass', name });

/** Nodes Karpenter may add for a GPU group; 0 means the group gets no NodePool. */
export function karpenterMaxNodes(group: GpuNodeGroupConfig): number {
  return group.karpenterMaxNodes ?? group.maxSize;
}

export function gpuNodePool(group: GpuNodeGroupConfig, consolidateAfter: string): Manifest {
  const shape = describeGpuInstance(group.instanceTypes[0] as string) as GpuInstance; // validated at load
  return {
    apiVersion: 'karpenter.sh/v1',
    kind: 'NodePool',
    metadata: { name: group.name },
    spec: {
      template: {
        metadata: { labels: gpuNodeLabels(group) },
        spec: {
          nodeClassRef: nodeClassRef(group.name),
          requirements: [
            // Exactly the group's types: one GPU model and count, so the product/count labels hold.
            requirement('node.kubernetes.io/instance-type', 'In', group.instanceTypes),
            requirement('karpenter.sh/capacity-type', 'In', [
              group.capacityType === 'SPOT' ? 'spot' : 'on-demand',
            ]),
            requirement('kubernetes.io/arch', 'In', ['amd64']),
            requirement('kubernetes.io/os', 'In', ['linux']),
          ],
          taints: [GPU_TAINT_K8S],
          expireAfter: NODE_EXPIRY,
        },
      },
      // A GPU node costs minutes of image pull and model load to replace: wait before removing an
      // empty or underused one (past KEDA's cooldown), and disrupt one GPU node at a time.
      disruption: {
        consolidationPolicy: 'WhenEmptyOrUnderutilized',
        consolidateAfter,
        budgets: [{ nodes: GPU_DISRUPTION_BUDGET }],
      },
      limits: { 'nvidia.com/gpu': karpenterMaxNodes(group) * shape.gpus },
    },
  };
}

export function systemNodePool(config: InfraConfig): Manifest {
  const pool = config.karpenter.systemPool;
  return {
    apiVersion: 'karpenter.sh/v1',
    kind: 'NodePool',
    metadata: { name: 'system' },
    spec: {
      template: {
        metadata: { labels: { [LABELS.nodeRole]: 'system' } },
        spec: {
          nodeClassRef: nodeClassRef('system'),
          requirements: [
            // Current general-purpose, compute and memory families; Karpenter picks the cheapest fit.
            requirement('karpenter.k8s.aws/instance-category', 'In', ['c', 'm', 'r']),
            requirement('karpenter.k8s.aws/instance-generation', 'Gt', ['5']),
            requirement('karpenter.sh/capacity-type', 'In', ['on-demand']),
            requirement('kubernetes.io/arch', 'In', [architecture(config.systemNodeGroup.amiType)]),
            requirement('kubernetes.io/os', 'In', ['linux']),
          ],
          expireAfter: NODE_EXPIRY,
        },
      },
      disruption: {
        consolidationPolicy: 'WhenEmptyOrUnderutilized',
        consolidateAfter: pool.consolidateAfter,
      },
      limits: { cpu: pool.maxCpu },
    },
  };
}

/** Every EC2NodeClass and NodePool of the configuration, each class before the pool that uses it. */
export function karpenterManifests(config: InfraConfig, ctx: NodeClassContext): Manifest[] {
  const gpu = config.gpuNodeGroups
    .filter((g) => karpenterMaxNodes(g) > 0)
    .flatMap((g) => [
      ec2NodeClass(g.name, g.amiType, g.diskSizeGiB, {
        ...ctx,
        // GPU nodes keep model weights in a node-local cache: on the NVMe, where there is one.
        instanceStorePolicy: config.karpenter.gpuInstanceStorePolicy === 'RAID0' ? 'RAID0' : undefined,
      }),
      gpuNodePool(g, config.karpenter.gpuConsolidateAfter),
    ]);
  const sys = config.systemNodeGroup;
  const system = config.karpenter.systemPool.enabled
    ? [
        ec2NodeClass('system', sys.amiType, sys.diskSizeGiB, { ...ctx, instanceStorePolicy: undefined }),
        systemNodePool(config),
      ]
    : [];
  return [...gpu, ...system];
}
