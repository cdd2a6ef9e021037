import { describe, expect, it } from 'vitest';
import { irsaTrust, refOf, synth, trustOf } from './helpers.js';

describe('IRSA roles', () => {
  // The cluster autoscaler's role is opt-in, and only without Karpenter.
  const s = synth({
    clusterName: 'strata-prod',
    karpenter: { enabled: false },
    irsa: {
      clusterAutoscaler: { enabled: true },
      router: {
        enabled: true,
        namespace: 'inference',
        serviceAccount: 'router',
        policyArns: ['arn:aws:iam::123456789012:policy/strata-router'],
      },
    },
  });
  const expectBoundTo = (roleName: string, namespace: string, serviceAccount: string) => {
    expect(trustOf(s, roleName).statements).toEqual(irsaTrust(s, namespace, serviceAccount));
  };

  it('binds the EBS CSI role to the OIDC provider and the controller service account', () => {
    expectBoundTo('strata-prod-ebs-csi', 'kube-system', 'ebs-csi-controller-sa');
    const { role } = trustOf(s, 'strata-prod-ebs-csi');
    const attachment = s.one(
      'aws_iam_role_policy_attachment',
      'policy_arn',
      'arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy',
    );
    expect(attachment.role).toBe(`\${${refOf(s, 'aws_iam_role', role)}.name}`);
  });

  it('binds the cluster autoscaler role and lets it scale only groups this cluster owns', () => {
    expectBoundTo('strata-prod-cluster-autoscaler', 'kube-system', 'cluster-autoscaler');
    const inline = s.one('aws_iam_role_policy', 'name', 'strata-prod-cluster-autoscaler');
    const policy = JSON.parse(String(inline.policy)) as { Statement: Record<string, unknown>[] };
    const scale = policy.Statement.find((st) => st.Sid === 'ScaleOwnedGroups');
    expect(scale).toEqual({
      Sid: 'ScaleOwnedGroups',
      Effect: 'Allow',
      Action: ['autoscaling:SetDesiredCapacity', 'autoscaling:TerminateInstanceInAutoScalingGroup'],
      Resource: '*',
      Condition: { StringEquals: { 'aws:ResourceTag/k8s.io/cluster-autoscaler/strata-prod': 'owned' } },
    });
    expect(policy.Statement.find((st) => st.Sid === 'Describe')?.Action).toContain('eks:DescribeNodegroup');
  });

  it("binds the router's optional role to the configured namespace and service account", () => {
    expectBoundTo('strata-prod-router', 'inference', 'router');
    expect(
      s.one('aws_iam_role_policy_attachment', 'policy_arn', 'arn:aws:iam::123456789012:policy/strata-router'),
    ).toBeDefined();
  });

  it('outputs each role ARN for the chart to annotate its service account with', () => {
    expect(
      Object.keys(s.output)
        .filter((k) => k.startsWith('irsa_'))
        .sort(),
    ).toEqual(['irsa_cluster_autoscaler_role_arn', 'irsa_ebs_csi_role_arn', 'irsa_router_role_arn']);
    expect(s.output.irsa_router_role_arn?.description).toBe('IRSA role for inference/router');
  });

  it('creates no optional role unless enabled, and no EBS role without the EBS add-on', () => {
    const bare = synth({
      karpenter: { enabled: false },
      loadBalancerController: { enabled: false },
      addons: [{ name: 'vpc-cni' }, { name: 'coredns' }, { name: 'kube-proxy' }],
    });
    expect(
      bare
        .all('aws_iam_role')
        .map((r) => r.name)
        .sort(),
    ).toEqual(['strata-cluster', 'strata-node']);
    expect(bare.data.aws_iam_policy_document).toBeUndefined();
  });
});
