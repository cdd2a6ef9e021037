// What the AWS Load Balancer Controller may do in AWS: the statements of the official
// docs/install/iam_policy.json of kubernetes-sigs/aws-load-balancer-controller v3.5.0 (unchanged
// since v2.17.1), in the same order and with the same scoping, plus Sids. Mutating calls on load
// balancers, target groups and security groups need the elbv2.k8s.aws/cluster tag the controller
// puts on what it creates, so it cannot touch load balancers it does not own. Commercial
// partition (arn:aws) only, like the official file; aws-cn and aws-us-gov have their own.

/** The controller version whose official policy these statements mirror. */
export const LOAD_BALANCER_CONTROLLER_POLICY_VERSION = 'v3.5.0';

const OWNED_TAG = 'elbv2.k8s.aws/cluster';
const elb = (resource: string) => `arn:aws:elasticloadbalancing:*:*:${resource}`;
const LOAD_BALANCERS_AND_TARGET_GROUPS = [
  elb('targetgroup/*/*'),
  elb('loadbalancer/net/*/*'),
  elb('loadbalancer/app/*/*'),
];
/** Condition: the resource already carries the controller's cluster tag. */
const resourceOwned = { Null: { [`aws:ResourceTag/${OWNED_TAG}`]: 'false' } };
/** Condition: the request sets the cluster tag (the resource is being created by the controller). */
const requestTagged = { Null: { [`aws:RequestTag/${OWNED_TAG}`]: 'false' } };
/** Condition: an owned resource whose cluster tag the request leaves alone. */
const ownedAndTagKept = {
  Null: { [`aws:RequestTag/${OWNED_TAG}`]: 'true', [`aws:ResourceTag/${OWNED_TAG}`]: 'false' },
};

export interface PolicyStatement {
  Sid: string;
  Effect: 'Allow' | 'Deny';
  Action: string[];
  Resource: string | string[];
  Condition?: Record<string, Record<string, string | string[]>>;
}

export function loadBalancerControllerPolicy(): { Version: string; Statement: PolicyStatement[] } {
  return {
    Version: '2012-10-17',
    Statement: [
      {
        Sid: 'CreateElbServiceLinkedRole',
        Effect: 'Allow',
        Action: ['iam:CreateServiceLinkedRole'],
        Resource: '*',
        Condition: { StringEquals: { 'iam:AWSServiceName': 'elasticloadbalancing.amazonaws.com' } },
      },
      {
        Sid: 'Describe',
        Effect: 'Allow',
        Action: [
          'ec2:DescribeAccountAttributes',
          'ec2:DescribeAddresses',
          'ec2:DescribeAvailabilityZones',
          'ec2:DescribeInternetGateways',
          'ec2:DescribeVpcs',
          'ec2:DescribeVpcPeeringConnections',
          'ec2:DescribeSubnets',
          'ec2:DescribeSecurityGroups',
          'ec2:DescribeInstances',
          'ec2:DescribeNetworkInterfaces',
          'ec2:DescribeTags',
          'ec2:GetCoipPoolUsage',
          'ec2:DescribeCoipPools',
          'ec2:GetSecurityGroupsForVpc',
          'ec2:DescribeIpamPools',
          'ec2:DescribeRouteTables',
          'elasticloadbalancing:DescribeLoadBalancers',
          'elasticloadbalancing:DescribeLoadBalancerAttributes',
          'elasticloadbalancing:DescribeListeners',
          'elasticloadbalancing:DescribeListenerCertificates',
          'elasticloadbalancing:DescribeSSLPolicies',
          'elasticloadbalancing:DescribeRules',
          'elasticloadbalancing:DescribeTargetGroups',
          'elasticloadbalancing:DescribeTargetGroupAttributes',
          'elasticloadbalancing:DescribeTargetHealth',
          'elasticloadbalancing:DescribeTags',
          'elasticloadbalancing:DescribeTrustStores',
          'elasticloadbalancing:DescribeListenerAttributes',
          'elasticloadbalancing:DescribeCapacityReservation',
        ],
        Resource: '*',
      },
      {
        // Certificates, WAF and Shield for ALB listeners (ingress annotations).
        Sid: 'CertificatesWafShield',
        Effect: 'Allow',
        Action: [
          'cognito-idp:DescribeUserPoolClient',
          'acm:ListCertificates',
          'acm:DescribeCertificate',
          'iam:ListServerCertificates',
          'iam:GetServerCertificate',
          'waf-regional:GetWebACL',
          'waf-regional:GetWebACLForResource',
          'waf-regional:AssociateWebACL',
          'waf-regional:DisassociateWebACL',
          'wafv2:GetWebACL',
          'wafv2:GetWebACLForResource',
          'wafv2:AssociateWebACL',
          'wafv2:DisassociateWebACL',
          'shield:GetSubscriptionState',
          'shield:DescribeProtection',
          'shield:CreateProtection',
          'shield:DeleteProtection',
        ],
        Resource: '*',
      },
      {
        // Node/pod security group rules for traffic from the load balancer (unscoped upstream too).
        Sid: 'SecurityGroupIngress',
        Effect: 'Allow',
        Action: ['ec2:AuthorizeSecurityGroupIngress', 'ec2:RevokeSecurityGroupIngress'],
        Resource: '*',
      },
      {
        Sid: 'CreateSecurityGroup',
        Effect: 'Allow',
        Action: ['ec2:CreateSecurityGroup'],
        Resource: '*',
      },
      {
        Sid: 'TagSecurityGroupOnCreate',
        Effect: 'Allow',
        Action: ['ec2:CreateTags'],
        Resource: 'arn:aws:ec2:*:*:security-group/*',
        Condition: {
          StringEquals: { 'ec2:CreateAction': 'CreateSecurityGroup' },
          ...requestTagged,
        },
      },
      {
        Sid: 'TagOwnedSecurityGroups',
        Effect: 'Allow',
        Action: ['ec2:CreateTags', 'ec2:DeleteTags'],
        Resource: 'arn:aws:ec2:*:*:security-group/*',
        Condition: ownedAndTagKept,
      },
      {
        Sid: 'ManageOwnedSecurityGroups',
        Effect: 'Allow',
        Action: [
          'ec2:AuthorizeSecurityGroupIngress',
          'ec2:RevokeSecurityGroupIngress',
          'ec2:DeleteSecurityGroup',
        ],
        Resource: '*',
        Condition: resourceOwned,
      },
      {
        Sid: 'CreateTaggedLoadBalancers',
        Effect: 'Allow',
        Action: ['elasticloadbalancing:CreateLoadBalancer', 'elasticloadbalancing:CreateTargetGroup'],
        Resource: '*',
        Condition: requestTagged,
      },
      {
        Sid: 'ListenersAndRules',
        Effect: 'Allow',
        Action: [
          'elasticloadbalancing:CreateListener',
          'elasticloadbalancing:DeleteListener',
          'elasticloadbalancing:CreateRule',
          'elasticloadbalancing:DeleteRule',
        ],
        Resource: '*',
      },
      {
        Sid: 'TagOwnedLoadBalancers',
        Effect: 'Allow',
        Action: ['elasticloadbalancing:AddTags', 'elasticloadbalancing:RemoveTags'],
        Resource: LOAD_BALANCERS_AND_TARGET_GROUPS,
        Condition: ownedAndTagKept,
      },
      {
        Sid: 'TagListenersAndRules',
        Effect: 'Allow',
        Action: ['elasticloadbalancing:AddTags', 'elasticloadbalancing:RemoveTags'],
        Resource: [
          elb('listener/net/*/*/*'),
          elb('listener/app/*/*/*'),
          elb('listener-rule/net/*/*/*'),
          elb('listener-rule/app/*/*/*'),
        ],
      },
      {
        Sid: 'ManageOwnedLoadBalancers',
        Effect: 'Allow',
        Action: [
          'elasticloadbalancing:ModifyLoadBalancerAttributes',
          'elasticloadbalancing:SetIpAddressType',
          'elasticloadbalancing:SetSecurityGroups',
          'elasticloadbalancing:SetSubnets',
          'elasticloadbalancing:DeleteLoadBalancer',
          'elasticloadbalancing:ModifyTargetGroup',
          'elasticloadbalancing:ModifyTargetGroupAttributes',
          'elasticloadbalancing:DeleteTargetGroup',
          'elasticloadbalancing:ModifyListenerAttributes',
          'elasticloadbalancing:ModifyCapacityReservation',
          'elasticloadbalancing:ModifyIpPools',
        ],
        Resource: '*',
        Condition: resourceOwned,
      },
      {
        Sid: 'TagLoadBalancersOnCreate',
        Effect: 'Allow',
        Action: ['elasticloadbalancing:AddTags'],
        Resource: LOAD_BALANCERS_AND_TARGET_GROUPS,
        Condition: {
          StringEquals: { 'elasticloadbalancing:CreateAction': ['CreateTargetGroup', 'CreateLoadBalancer'] },
          ...requestTagged,
        },
      },
      {
        Sid: 'RegisterTargets',
        Effect: 'Allow',
        Action: ['elasticloadbalancing:RegisterTargets', 'elasticloadbalancing:DeregisterTargets'],
        Resource: elb('targetgroup/*/*'),
      },
      {
        Sid: 'ModifyListenersAndRules',
        Effect: 'Allow',
        Action: [
          'elasticloadbalancing:SetWebAcl',
          'elasticloadbalancing:ModifyListener',
          'elasticloadbalancing:AddListenerCertificates',
          'elasticloadbalancing:RemoveListenerCertificates',
          'elasticloadbalancing:ModifyRule',
          'elasticloadbalancing:SetRulePriorities',
        ],
        Resource: '*',
      },
    ],
  };
}
