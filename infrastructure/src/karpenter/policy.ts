// What the Karpenter controller may do in AWS: the statements of Karpenter's getting-started
// CloudFormation template (v1.14: NodeLifecycle, IAMIntegration, EKSIntegration, Interruption and
// ResourceDiscovery policies) with the same Sids and scoping. Launches, tags and terminations are
// limited to resources tagged kubernetes.io/cluster/<cluster>=owned and karpenter.sh/nodepool.
// Left out on purpose: the instance-profile create/tag/add-role/remove-role/delete statements
// (Terraform owns the node instance profile and the EC2NodeClasses name it in spec.instanceProfile)
// and the zonal-shift read (settings.enableZonalShift stays off). Commercial partition (arn:aws).
import type { PolicyStatement } from '../addons/load-balancer-controller-policy.js';

export interface KarpenterPolicyRefs {
  clusterName: string;
  region: string;
  clusterArn: string;
  queueArn: string;
  nodeRoleArn: string;
  instanceProfileArn: string;
}

export function karpenterControllerPolicy(refs: KarpenterPolicyRefs): {
  Version: string;
  Statement: PolicyStatement[];
} {
  const { clusterName, region } = refs;
  const ec2 = (resource: string) => `arn:aws:ec2:${region}:*:${resource}`;
  const clusterOwned = `kubernetes.io/cluster/${clusterName}`;
  const launched = [
    ec2('fleet/*'),
    ec2('instance/*'),
    ec2('volume/*'),
    ec2('network-interface/*'),
    ec2('launch-template/*'),
    ec2('spot-instances-request/*'),
  ];
  /** The request tags Karpenter sets on everything it launches, which the conditions require. */
  const requestTags = {
    StringEquals: {
      [`aws:RequestTag/${clusterOwned}`]: 'owned',
      'aws:RequestTag/eks:eks-cluster-name': clusterName,
    },
    StringLike: { 'aws:RequestTag/karpenter.sh/nodepool': '*' },
  };
  /** A resource Karpenter launched for this cluster. */
  const ownedByKarpenter = {
    StringEquals: { [`aws:ResourceTag/${clusterOwned}`]: 'owned' },
    StringLike: { 'aws:ResourceTag/karpenter.sh/nodepool': '*' },
  };

  return {
    Version: '2012-10-17',
    Statement: [
      {
        Sid: 'AllowScopedEC2InstanceAccessActions',
        Effect: 'Allow',
        Resource: [
          `arn:aws:ec2:${region}::image/*`,
          `arn:aws:ec2:${region}::snapshot/*`,
          ec2('security-group/*'),
          ec2('subnet/*'),
          ec2('capacity-reservation/*'),
          ec2('placement-group/*'),
        ],
        Action: ['ec2:RunInstances', 'ec2:CreateFleet'],
      },
      {
        Sid: 'AllowScopedEC2LaunchTemplateAccessActions',
        Effect: 'Allow',
        Resource: ec2('launch-template/*'),
        Action: ['ec2:RunInstances', 'ec2:CreateFleet'],
        Condition: ownedByKarpenter,
      },
      {
        Sid: 'AllowScopedEC2InstanceActionsWithTags',
        Effect: 'Allow',
        Resource: launched,
        Action: ['ec2:RunInstances', 'ec2:CreateFleet', 'ec2:CreateLaunchTemplate'],
        Condition: requestTags,
      },
      {
        Sid: 'AllowScopedResourceCreationTagging',
        Effect: 'Allow',
        Resource: launched,
        Action: ['ec2:CreateTags'],
        Condition: {
          StringEquals: {
            ...requestTags.StringEquals,
            'ec2:CreateAction': ['RunInstances', 'CreateFleet', 'CreateLaunchTemplate'],
          },
          StringLike: requestTags.StringLike,
        },
      },
      {
        // Karpenter names instances and records their NodeClaim after launch; nothing else.
        Sid: 'AllowScopedResourceTagging',
        Effect: 'Allow',
        Resource: ec2('instance/*'),
        Action: ['ec2:CreateTags'],
        Condition: {
          ...ownedByKarpenter,
          StringEqualsIfExists: { 'aws:RequestTag/eks:eks-cluster-name': clusterName },
          'ForAllValues:StringEquals': {
            'aws:TagKeys': ['eks:eks-cluster-name', 'karpenter.sh/nodeclaim', 'Name'],
          },
        },
      },
      {
        Sid: 'AllowScopedDeletion',
        Effect: 'Allow',
        Resource: [ec2('instance/*'), ec2('launch-template/*')],
        Action: ['ec2:TerminateInstances', 'ec2:DeleteLaunchTemplate'],
        Condition: ownedByKarpenter,
      },
      {
        Sid: 'AllowPassingInstanceRole',
        Effect: 'Allow',
        Resource: refs.nodeRoleArn,
        Action: ['iam:PassRole'],
        Condition: { StringEquals: { 'iam:PassedToService': ['ec2.amazonaws.com', 'ec2.amazonaws.com.cn'] } },
      },
      {
        Sid: 'AllowAPIServerEndpointDiscovery',
        Effect: 'Allow',
        Resource: refs.clusterArn,
        Action: ['eks:DescribeCluster'],
      },
      {
        Sid: 'AllowInterruptionQueueActions',
        Effect: 'Allow',
        Resource: refs.queueArn,
        Action: ['sqs:DeleteMessage', 'sqs:GetQueueUrl', 'sqs:ReceiveMessage'],
      },
      {
        Sid: 'AllowRegionalReadActions',
        Effect: 'Allow',
        Resource: '*',
        Action: [
          'ec2:DescribeCapacityReservations',
          'ec2:DescribeImages',
          'ec2:DescribeInstances',
          'ec2:DescribeInstanceStatus',
          'ec2:DescribeInstanceTypeOfferings',
          'ec2:DescribeInstanceTypes',
          'ec2:DescribeLaunchTemplates',
          'ec2:DescribePlacementGroups',
          'ec2:DescribeSecurityGroups',
          'ec2:DescribeSpotPriceHistory',
          'ec2:DescribeSubnets',
        ],
        Condition: { StringEquals: { 'aws:RequestedRegion': region } },
      },
      {
        // The EKS-optimized AMI ids behind the amiSelectorTerms aliases.
        Sid: 'AllowSSMReadActions',
        Effect: 'Allow',
        Resource: `arn:aws:ssm:${region}::parameter/aws/service/*`,
        Action: ['ssm:GetParameter'],
      },
      {
        Sid: 'AllowPricingReadActions',
        Effect: 'Allow',
        Resource: '*',
        Action: ['pricing:GetProducts'],
      },
      {
        Sid: 'AllowUnscopedInstanceProfileListAction',
        Effect: 'Allow',
        Resource: '*',
        Action: ['iam:ListInstanceProfiles'],
      },
      {
        Sid: 'AllowInstanceProfileReadActions',
        Effect: 'Allow',
        Resource: refs.instanceProfileArn,
        Action: ['iam:GetInstanceProfile'],
      },
    ],
  };
}

/** EventBridge events Karpenter reacts to before AWS takes an instance away (or has). */
export const INTERRUPTION_EVENTS = [
  { id: 'health', source: 'aws.health', detailType: 'AWS Health Event' },
  { id: 'spot', source: 'aws.ec2', detailType: 'EC2 Spot Instance Interruption Warning' },
  { id: 'rebalance', source: 'aws.ec2', detailType: 'EC2 Instance Rebalance Recommendation' },
  { id: 'state', source: 'aws.ec2', detailType: 'EC2 Instance State-change Notification' },
  {
    id: 'capacity',
    source: 'aws.ec2',
    detailType: 'EC2 Capacity Reservation Instance Interruption Warning',
  },
] as const;

/** Only EventBridge (and SQS itself) may send to the queue, and only over TLS. */
export function interruptionQueuePolicy(queueArn: string): string {
  return JSON.stringify({
    Version: '2012-10-17',
    Id: 'EC2InterruptionPolicy',
    Statement: [
      {
        Sid: 'AllowEventBridge',
        Effect: 'Allow',
        Principal: { Service: ['events.amazonaws.com', 'sqs.amazonaws.com'] },
        Action: 'sqs:SendMessage',
        Resource: queueArn,
      },
      {
        Sid: 'DenyHTTP',
        Effect: 'Deny',
        Principal: '*',
        Action: 'sqs:*',
        Resource: queueArn,
        Condition: { Bool: { 'aws:SecureTransport': 'false' } },
      },
    ],
  });
}
