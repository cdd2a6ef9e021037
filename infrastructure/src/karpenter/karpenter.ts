// Karpenter: launches EC2 instances for pods that no node can take (a KEDA scale-out, a backend
// rollout's surge pod) and removes them when they are no longer needed. AWS side: the nodes' IAM
// role, instance profile and EKS access entry, the interruption queue fed by EventBridge, the
// controller's IRSA role and the security-group discovery tag. Cluster side, three Helm releases
// in order: karpenter-crd (CRDs, upgraded with the chart), karpenter (the controller, on the
// managed system nodes), and the EC2NodeClasses and NodePools (a local chart, after the CRDs).
import { fileURLToPath } from 'node:url';
import { CloudwatchEventRule } from '@cdktf/provider-aws/lib/cloudwatch-event-rule/index.js';
import { CloudwatchEventTarget } from '@cdktf/provider-aws/lib/cloudwatch-event-target/index.js';
import { Ec2Tag } from '@cdktf/provider-aws/lib/ec2-tag/index.js';
import { EksAccessEntry } from '@cdktf/provider-aws/lib/eks-access-entry/index.js';
import type { EksCluster } from '@cdktf/provider-aws/lib/eks-cluster/index.js';
import { IamInstanceProfile } from '@cdktf/provider-aws/lib/iam-instance-profile/index.js';
import type { IamOpenidConnectProvider } from '@cdktf/provider-aws/lib/iam-openid-connect-provider/index.js';
import type { IamRole } from '@cdktf/provider-aws/lib/iam-role/index.js';
import { SqsQueue } from '@cdktf/provider-aws/lib/sqs-queue/index.js';
import { SqsQueuePolicy } from '@cdktf/provider-aws/lib/sqs-queue-policy/index.js';
import type { HelmProvider } from '@cdktf/provider-helm/lib/provider/index.js';
import { Release } from '@cdktf/provider-helm/lib/release/index.js';
import { AssetType, type ITerraformDependable, TerraformAsset } from 'cdktf';
import { Construct } from 'constructs';
import { helmValues } from '../addons/helm.js';
import { managedPolicy, serviceRole } from '../cluster/iam.js';
import { IrsaRole } from '../cluster/irsa.js';
import type { InfraConfig } from '../config/schema.js';
import { DISCOVERY_TAG, karpenterManifests, type Manifest } from './node-pools.js';
import { INTERRUPTION_EVENTS, interruptionQueuePolicy, karpenterControllerPolicy } from './policy.js';

export const KARPENTER = {
  repository: 'oci://public.ecr.aws/karpenter',
  namespace: 'kube-system',
  serviceAccount: 'karpenter',
} as const;

/** The local chart that applies `values.manifests` (charts/karpenter-node-pools). */
export const NODE_POOLS_CHART_DIR = fileURLToPath(
  new URL('../../charts/karpenter-node-pools', import.meta.url),
);

export interface KarpenterProps {
  cluster: EksCluster;
  oidcProvider: IamOpenidConnectProvider;
  /** Managed node group the controller runs on (never on nodes it manages itself). */
  systemNodeGroupName: string;
  helm: HelmProvider;
  /** What the releases wait for: system nodes and the add-ons pods need (CoreDNS). */
  dependsOn: ITerraformDependable[];
}

export function karpenterValues(refs: {
  clusterName: string;
  clusterEndpoint: string;
  interruptionQueue: string;
  roleArn: string;
  systemNodeGroupName: string;
}): Record<string, unknown> {
  return {
    settings: {
      clusterName: refs.clusterName,
      clusterEndpoint: refs.clusterEndpoint,
      interruptionQueue: refs.interruptionQueue,
    },
    serviceAccount: {
      create: true,
      name: KARPENTER.serviceAccount,
      annotations: { 'eks.amazonaws.com/role-arn': refs.roleArn },
    },
    // Replaces the chart's node affinity (lists are not merged); its pod anti-affinity stays.
    affinity: {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            {
              matchExpressions: [
                { key: 'karpenter.sh/nodepool', operator: 'DoesNotExist' },
                { key: 'eks.amazonaws.com/nodegroup', operator: 'In', values: [refs.systemNodeGroupName] },
              ],
            },
          ],
        },
      },
    },
    // Half the upstream example's CPU: two replicas must fit beside CoreDNS on two m6i.large.
    controller: {
      resources: { requests: { cpu: '500m', memory: '1Gi' }, limits: { memory: '1Gi' } },
    },
  };
}

export class Karpenter extends Construct {
  readonly nodeRole: IamRole;
  readonly instanceProfile: IamInstanceProfile;
  readonly queue: SqsQueue;
  readonly controllerRole: IrsaRole;
  readonly crds: Release;
  readonly controller: Release;
  /** Absent when no GPU group has a Karpenter pool and the system pool is off. */
  readonly nodePools?: Release;
  readonly manifests: Manifest[];

  constructor(scope: Construct, id: string, config: InfraConfig, props: KarpenterProps) {
    super(scope, id);
    const name = config.clusterName;
    const { cluster } = props;
    const version = config.karpenter.chartVersion;

    // Nodes: the same managed policies as the node groups' role (ECR pull-only instead of read).
    const { role, attachments } = serviceRole(
      this,
      'node-role',
      `${name}-karpenter-node`,
      'ec2.amazonaws.com',
      [
        managedPolicy('AmazonEKSWorkerNodePolicy'),
        managedPolicy('AmazonEKS_CNI_Policy'),
        managedPolicy('AmazonEC2ContainerRegistryPullOnly'),
        managedPolicy('AmazonSSMManagedInstanceCore'),
      ],
    );
    this.nodeRole = role;
    this.instanceProfile = new IamInstanceProfile(this, 'node-profile', {
      name: `${name}-karpenter-node`,
      role: role.name,
    });
    // Lets kubelets with this role join (the cluster authenticates with access entries).
    const access = new EksAccessEntry(this, 'node-access', {
      clusterName: cluster.name,
      principalArn: role.arn,
      type: 'EC2_LINUX',
    });

    this.queue = new SqsQueue(this, 'interruption-queue', {
      name: `${name}-karpenter`,
      messageRetentionSeconds: 300, // stale notices are useless: the instance is gone by then
      sqsManagedSseEnabled: true,
    });
    new SqsQueuePolicy(this, 'interruption-queue-policy', {
      queueUrl: this.queue.url,
      policy: interruptionQueuePolicy(this.queue.arn),
    });
    for (const event of INTERRUPTION_EVENTS) {
      const rule = new CloudwatchEventRule(this, `interruption-${event.id}`, {
        name: `${name}-karpenter-${event.id}`,
        description: `Karpenter (${name}): ${event.detailType}`,
        eventPattern: JSON.stringify({ source: [event.source], 'detail-type': [event.detailType] }),
      });
      new CloudwatchEventTarget(this, `interruption-${event.id}-target`, {
        rule: rule.name,
        targetId: 'KarpenterInterruptionQueueTarget',
        arn: this.queue.arn,
      });
    }

    // The cluster security group (EKS creates it; the managed nodes use it too) for EC2NodeClasses.
    new Ec2Tag(this, 'cluster-sg-discovery', {
      resourceId: cluster.vpcConfig.clusterSecurityGroupId,
      key: DISCOVERY_TAG,
      value: name,
    });

    this.controllerRole = new IrsaRole(this, 'controller-irsa', {
      roleName: `${name}-karpenter`,
      oidcProvider: props.oidcProvider,
      namespace: KARPENTER.namespace,
      serviceAccount: KARPENTER.serviceAccount,
      inlinePolicy: JSON.stringify(
        karpenterControllerPolicy({
          clusterName: name,
          region: config.region,
          clusterArn: cluster.arn,
          queueArn: this.queue.arn,
          nodeRoleArn: role.arn,
          instanceProfileArn: this.instanceProfile.arn,
        }),
      ),
    });

    const release = {
      provider: props.helm,
      repository: KARPENTER.repository,
      version,
      namespace: KARPENTER.namespace,
    };
    this.crds = new Release(this, 'crd-release', {
      ...release,
      name: 'karpenter-crd',
      chart: 'karpenter-crd',
      dependsOn: props.dependsOn,
    });
    this.controller = new Release(this, 'release', {
      ...release,
      name: 'karpenter',
      chart: 'karpenter',
      skipCrds: true, // owned by the karpenter-crd release, which (unlike crds/) Helm upgrades
      values: [
        helmValues(
          karpenterValues({
            clusterName: cluster.name,
            clusterEndpoint: cluster.endpoint,
            interruptionQueue: this.queue.name,
            roleArn: this.controllerRole.role.arn,
            systemNodeGroupName: props.systemNodeGroupName,
          }),
        ),
      ],
      dependsOn: [this.crds, access, ...attachments, ...this.controllerRole.grants, ...props.dependsOn],
    });

    this.manifests = karpenterManifests(config, {
      clusterName: name,
      instanceProfile: this.instanceProfile.name,
      tags: config.tags,
      amiVersions: config.karpenter.amiVersions,
    });
    if (this.manifests.length === 0) return;
    // Copied next to the synthesized JSON (assets/), so terraform finds it from that directory.
    const chart = new TerraformAsset(this, 'node-pools-chart', {
      path: NODE_POOLS_CHART_DIR,
      type: AssetType.DIRECTORY,
    });
    this.nodePools = new Release(this, 'node-pools-release', {
      provider: props.helm,
      name: 'karpenter-node-pools',
      chart: `./${chart.path}`,
      namespace: KARPENTER.namespace,
      values: [helmValues({ manifests: this.manifests })],
      // After the controller: its NodePools need the CRDs, and on destroy they go first, while
      // Karpenter still runs to terminate their nodes.
      dependsOn: [this.controller],
    });
  }
}
