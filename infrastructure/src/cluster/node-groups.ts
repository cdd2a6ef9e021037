// Managed node groups: one system group for cluster services and one group per configured GPU
// shape. GPU nodes carry labels the chart selects on and a NoSchedule taint, so only pods that
// tolerate nvidia.com/gpu (the backends, the device plugin) land on the expensive machines.
import { EksNodeGroup } from '@cdktf/provider-aws/lib/eks-node-group/index.js';
import type { ITerraformDependable } from 'cdktf';
import { Construct } from 'constructs';
import { describeGpuInstance, type GpuInstance } from '../config/gpu-instances.js';
import type { GpuNodeGroupConfig, InfraConfig } from '../config/schema.js';
import { managedPolicy, serviceRole } from './iam.js';

/** Label keys shared with the Helm chart (nodeSelector) and the device plugin (affinity). */
export const LABELS = {
  gpu: 'strata.dev/gpu',
  nodeGroup: 'strata.dev/node-group',
  nodeRole: 'strata.dev/node-role',
  gpuAmi: 'strata.dev/gpu-ami',
  gpuFamily: 'strata.dev/gpu-family',
  gpuProduct: 'nvidia.com/gpu.product',
  gpuCount: 'nvidia.com/gpu.count',
} as const;

export const GPU_TAINT = { key: 'nvidia.com/gpu', value: 'true', effect: 'NO_SCHEDULE' } as const;

/** Tags the scale script reads to restore a group after `gpu-scale.sh down` (see scripts/). */
export const SCALE_TAGS = {
  gpu: 'strata.dev/gpu',
  min: 'strata.dev/min-size',
  desired: 'strata.dev/desired-size',
  max: 'strata.dev/max-size',
} as const;

export function gpuLabels(group: GpuNodeGroupConfig): Record<string, string> {
  const shape = describeGpuInstance(group.instanceTypes[0] as string) as GpuInstance; // validated at load
  return {
    [LABELS.gpu]: 'true',
    [LABELS.nodeGroup]: group.name,
    [LABELS.gpuAmi]: group.amiType.startsWith('BOTTLEROCKET') ? 'bottlerocket' : 'al2023',
    [LABELS.gpuFamily]: shape.family,
    [LABELS.gpuProduct]: shape.spec.product,
    [LABELS.gpuCount]: String(shape.gpus),
    ...group.labels,
  };
}

/** Every label of a GPU node of this group: the managed group's and its Karpenter NodePool's. */
export function gpuNodeLabels(group: GpuNodeGroupConfig): Record<string, string> {
  return { ...gpuLabels(group), [LABELS.nodeRole]: 'gpu' };
}

export class StrataNodeGroups extends Construct {
  readonly system: EksNodeGroup;
  readonly gpu: EksNodeGroup[];

  constructor(
    scope: Construct,
    id: string,
    config: InfraConfig,
    props: { clusterName: string; subnetIds: string[]; dependsOn: ITerraformDependable[] },
  ) {
    super(scope, id);
    const { role, attachments } = serviceRole(
      this,
      'node-role',
      `${config.clusterName}-node`,
      'ec2.amazonaws.com',
      [
        managedPolicy('AmazonEKSWorkerNodePolicy'),
        managedPolicy('AmazonEKS_CNI_Policy'),
        managedPolicy('AmazonEC2ContainerRegistryReadOnly'),
        managedPolicy('AmazonSSMManagedInstanceCore'), // shell access without SSH keys or bastions
      ],
    );
    const common = {
      clusterName: props.clusterName,
      nodeRoleArn: role.arn,
      subnetIds: props.subnetIds,
      updateConfig: { maxUnavailable: 1 },
      dependsOn: [...attachments, ...props.dependsOn],
      // The cluster autoscaler and gpu-scale.sh own desired_size between deploys.
      lifecycle: { ignoreChanges: ['scaling_config[0].desired_size'] },
    };

    const sys = config.systemNodeGroup;
    this.system = new EksNodeGroup(this, 'system', {
      ...common,
      nodeGroupName: 'system',
      instanceTypes: sys.instanceTypes,
      amiType: sys.amiType,
      diskSize: sys.diskSizeGiB,
      scalingConfig: { minSize: sys.minSize, maxSize: sys.maxSize, desiredSize: sys.desiredSize },
      labels: { [LABELS.nodeRole]: 'system' },
    });

    this.gpu = config.gpuNodeGroups.map(
      (group) =>
        new EksNodeGroup(this, `gpu-${group.name}`, {
          ...common,
          nodeGroupName: group.name,
          instanceTypes: group.instanceTypes,
          amiType: group.amiType,
          capacityType: group.capacityType,
          diskSize: group.diskSizeGiB,
          scalingConfig: { minSize: group.minSize, maxSize: group.maxSize, desiredSize: group.desiredSize },
          labels: gpuNodeLabels(group),
          taint: [GPU_TAINT],
          tags: {
            [SCALE_TAGS.gpu]: 'true',
            [SCALE_TAGS.min]: String(group.minSize),
            [SCALE_TAGS.desired]: String(group.desiredSize),
            [SCALE_TAGS.max]: String(group.maxSize),
          },
        }),
    );
  }
}
