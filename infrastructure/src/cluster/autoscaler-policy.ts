// What the Kubernetes cluster autoscaler needs (its AWS cloud-provider docs): read the node groups
// and instance types anywhere; change capacity only of ASGs tagged as owned by this cluster.
// EKS puts that tag on every managed node group's ASG itself.
export function clusterAutoscalerPolicy(clusterName: string): string {
  return JSON.stringify({
    Version: '2012-10-17',
    Statement: [
      {
        Sid: 'Describe',
        Effect: 'Allow',
        Action: [
          'autoscaling:DescribeAutoScalingGroups',
          'autoscaling:DescribeAutoScalingInstances',
          'autoscaling:DescribeLaunchConfigurations',
          'autoscaling:DescribeScalingActivities',
          'autoscaling:DescribeTags',
          'ec2:DescribeImages',
          'ec2:DescribeInstanceTypes',
          'ec2:DescribeLaunchTemplateVersions',
          'ec2:GetInstanceTypesFromInstanceRequirements',
          // Labels and taints of an empty group, so it can scale from zero.
          'eks:DescribeNodegroup',
        ],
        Resource: '*',
      },
      {
        Sid: 'ScaleOwnedGroups',
        Effect: 'Allow',
        Action: ['autoscaling:SetDesiredCapacity', 'autoscaling:TerminateInstanceInAutoScalingGroup'],
        Resource: '*',
        Condition: {
          StringEquals: { [`aws:ResourceTag/k8s.io/cluster-autoscaler/${clusterName}`]: 'owned' },
        },
      },
    ],
  });
}
