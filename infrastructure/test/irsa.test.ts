import { describe, expect, it } from 'vitest';
import { refOf, type Synthesized, synth } from './helpers.js';

/** The trust policy document behind one IRSA role, and the role itself. */
function irsa(s: Synthesized, roleName: string) {
  const role = s.one('aws_iam_role', 'name', roleName);
  const match = /^\$\{data\.aws_iam_policy_document\.(.+)\.json\}$/.exec(String(role.assume_role_policy));
  if (!match?.[1])
    throw new Error(`${roleName} does not trust a policy document: ${role.assume_role_policy}`);
  const doc = s.data.aws_iam_policy_document?.[match[1]] as { statement: Record<string, unknown>[] };
  return { role, statements: doc.statement };
}

describe('IRSA roles', () => {
  const s = synth({
    clusterName: 'strata-prod',
    irsa: {
      router: {
        enabled: true,
        namespace: 'inference',
        serviceAccount: 'router',
        policyArns: ['arn:aws:iam::123456789012:policy/strata-router'],
      },
    },
  });
  const oidc = s.all('aws_iam_openid_connect_provider')[0] as Record<string, unknown>;
  const oidcRef = refOf(s, 'aws_iam_openid_connect_provider', oidc);
  const issuer = `\${replace(${oidcRef}.url, "https://", "")}`;

  const expectBoundTo = (roleName: string, namespace: string, serviceAccount: string) => {
    const { statements } = irsa(s, roleName);
    expect(statements).toEqual([
      {
        effect: 'Allow',
        actions: ['sts:AssumeRoleWithWebIdentity'],
        principals: [{ type: 'Federated', identifiers: [`\${${oidcRef}.arn}`] }],
        condition: [
          {
            test: 'StringEquals',
            variable: `${issuer}:sub`,
            values: [`system:serviceaccount:${namespace}:${serviceAccount}`],
          },
          { test: 'StringEquals', variable: `${issuer}:aud`, values: ['sts.amazonaws.com'] },
        ],
      },
    ]);
  };

  it('binds the EBS CSI role to the OIDC provider and the controller service account', () => {
    expectBoundTo('strata-prod-ebs-csi', 'kube-system', 'ebs-csi-controller-sa');
    const { role } = irsa(s, 'strata-prod-ebs-csi');
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

  it('creates no router or autoscaler role unless enabled, and no EBS role without the EBS add-on', () => {
    const bare = synth({
      irsa: { clusterAutoscaler: { enabled: false } },
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
