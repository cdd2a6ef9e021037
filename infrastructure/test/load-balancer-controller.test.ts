import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { loadBalancerControllerPolicy } from '../src/addons/load-balancer-controller-policy.js';
import { irsaTrust, refOf, releaseValues, synth, trustOf } from './helpers.js';

const productionValues = parse(
  readFileSync(new URL('../../helm/strata/ci/production-values.yaml', import.meta.url), 'utf8'),
) as { envoy: { service: { type: string; annotations: Record<string, string> } } };

describe('AWS Load Balancer Controller', () => {
  const s = synth({ clusterName: 'strata-prod', region: 'us-east-1' });
  const cluster = s.all('aws_eks_cluster')[0] as Record<string, unknown>;
  const clusterRef = refOf(s, 'aws_eks_cluster', cluster);
  const role = s.one('aws_iam_role', 'name', 'strata-prod-lb-controller');
  const roleRef = refOf(s, 'aws_iam_role', role);

  it('installs the eks-charts chart at its pinned version into kube-system', () => {
    expect(s.one('helm_release', 'name', 'aws-load-balancer-controller')).toMatchObject({
      repository: 'https://aws.github.io/eks-charts',
      chart: 'aws-load-balancer-controller',
      version: '3.5.0',
      namespace: 'kube-system',
      provider: 'helm',
    });
  });

  it('passes cluster name, region and VPC, and annotates its service account with the IRSA role', () => {
    const vpc = s.all('aws_vpc')[0] as Record<string, unknown>;
    expect(releaseValues(s, 'aws-load-balancer-controller')).toEqual({
      clusterName: `\${${clusterRef}.name}`,
      region: 'us-east-1',
      vpcId: `\${${refOf(s, 'aws_vpc', vpc)}.id}`,
      serviceAccount: {
        create: true,
        name: 'aws-load-balancer-controller',
        annotations: { 'eks.amazonaws.com/role-arn': `\${${roleRef}.arn}` },
      },
      nodeSelector: { 'strata.dev/node-role': 'system' },
    });
  });

  it('has a role only kube-system/aws-load-balancer-controller can assume, through the OIDC provider', () => {
    expect(trustOf(s, 'strata-prod-lb-controller').statements).toEqual(
      irsaTrust(s, 'kube-system', 'aws-load-balancer-controller'),
    );
  });

  it('grants what the controller does for an NLB, mutations only on load balancers it tagged as its own', () => {
    const inline = s.one('aws_iam_role_policy', 'name', 'strata-prod-lb-controller');
    expect(inline.role).toBe(`\${${roleRef}.name}`);
    const policy = JSON.parse(String(inline.policy)) as ReturnType<typeof loadBalancerControllerPolicy>;
    expect(policy.Version).toBe('2012-10-17');
    const statements = policy.Statement;
    const granting = (action: string) =>
      statements.filter((st) => st.Effect === 'Allow' && st.Action.includes(action));
    // Every call the controller makes to reconcile an internet-facing NLB with IP targets.
    for (const action of [
      'ec2:DescribeSubnets',
      'ec2:DescribeSecurityGroups',
      'ec2:DescribeVpcs',
      'ec2:CreateSecurityGroup',
      'ec2:AuthorizeSecurityGroupIngress',
      'elasticloadbalancing:DescribeLoadBalancers',
      'elasticloadbalancing:DescribeTargetGroups',
      'elasticloadbalancing:CreateLoadBalancer',
      'elasticloadbalancing:CreateTargetGroup',
      'elasticloadbalancing:CreateListener',
      'elasticloadbalancing:RegisterTargets',
      'elasticloadbalancing:DeregisterTargets',
      'elasticloadbalancing:DeleteLoadBalancer',
      'elasticloadbalancing:ModifyTargetGroup',
      'iam:CreateServiceLinkedRole',
    ]) {
      expect(granting(action).length, action).toBeGreaterThan(0);
    }
    const tag = 'elbv2.k8s.aws/cluster';
    // Creating needs the request to carry the controller's tag; deleting and changing, the resource.
    for (const action of [
      'elasticloadbalancing:CreateLoadBalancer',
      'elasticloadbalancing:CreateTargetGroup',
    ]) {
      for (const st of granting(action))
        expect(st.Condition?.Null?.[`aws:RequestTag/${tag}`], action).toBe('false');
    }
    for (const action of [
      'elasticloadbalancing:DeleteLoadBalancer',
      'elasticloadbalancing:ModifyTargetGroup',
    ]) {
      for (const st of granting(action))
        expect(st.Condition?.Null?.[`aws:ResourceTag/${tag}`], action).toBe('false');
    }
    // The service-linked role only for Elastic Load Balancing.
    for (const st of granting('iam:CreateServiceLinkedRole')) {
      expect(st.Condition?.StringEquals?.['iam:AWSServiceName']).toBe('elasticloadbalancing.amazonaws.com');
    }
    expect(new Set(statements.map((st) => st.Sid)).size).toBe(statements.length);
    // IAM's limit for a role's inline policies is 10,240 characters.
    expect(String(inline.policy).length).toBeLessThan(10_240);
  });

  it('waits for the system nodes, CoreDNS, its permissions and Karpenter (whose Service its webhook would reject)', () => {
    const deps = s.one('helm_release', 'name', 'aws-load-balancer-controller').depends_on as string[];
    expect(deps).toContain(
      refOf(s, 'aws_eks_node_group', s.one('aws_eks_node_group', 'node_group_name', 'system')),
    );
    expect(deps).toContain(refOf(s, 'aws_eks_addon', s.one('aws_eks_addon', 'addon_name', 'coredns')));
    expect(deps).toContain(
      refOf(s, 'aws_iam_role_policy', s.one('aws_iam_role_policy', 'name', 'strata-prod-lb-controller')),
    );
    expect(deps).toContain(refOf(s, 'helm_release', s.one('helm_release', 'name', 'karpenter')));
  });

  it('finds the subnets the chart asks for: public ones tagged elb, private ones internal-elb, all with the cluster tag', () => {
    // The chart's production values ask for an internet-facing NLB with IP targets from this controller.
    expect(productionValues.envoy.service).toMatchObject({
      type: 'LoadBalancer',
      annotations: {
        'service.beta.kubernetes.io/aws-load-balancer-type': 'external',
        'service.beta.kubernetes.io/aws-load-balancer-scheme': 'internet-facing',
        'service.beta.kubernetes.io/aws-load-balancer-nlb-target-type': 'ip',
      },
    });
    const subnets = s.all('aws_subnet').map((x) => x.tags as Record<string, string>);
    const pub = subnets.filter((t) => t.Name?.startsWith('strata-prod-public-'));
    const priv = subnets.filter((t) => t.Name?.startsWith('strata-prod-private-'));
    expect(pub).toHaveLength(3);
    expect(priv).toHaveLength(3);
    for (const t of pub) {
      expect(t).toMatchObject({
        'kubernetes.io/role/elb': '1',
        'kubernetes.io/cluster/strata-prod': 'shared',
      });
      expect(t['kubernetes.io/role/internal-elb']).toBeUndefined();
    }
    for (const t of priv) {
      expect(t).toMatchObject({
        'kubernetes.io/role/internal-elb': '1',
        'kubernetes.io/cluster/strata-prod': 'shared',
      });
      expect(t['kubernetes.io/role/elb']).toBeUndefined();
    }
  });

  it('outputs its role ARN, and is left out when disabled', () => {
    expect(s.output.aws_load_balancer_controller_role_arn?.value).toBe(`\${${roleRef}.arn}`);
    const off = synth({ loadBalancerController: { enabled: false } });
    expect(off.all('helm_release').map((r) => r.name)).not.toContain('aws-load-balancer-controller');
    expect(off.all('aws_iam_role').map((r) => r.name)).not.toContain('strata-lb-controller');
    expect(off.output.aws_load_balancer_controller_role_arn).toBeUndefined();
  });
});
