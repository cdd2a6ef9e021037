import { Testing } from 'cdktf';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { refOf, type Synthesized, synth } from './helpers.js';

describe('EKS add-ons', () => {
  const s = synth({
    addons: [
      { name: 'vpc-cni', version: 'v1.20.4-eksbuild.1' },
      { name: 'coredns' },
      { name: 'kube-proxy' },
      { name: 'aws-ebs-csi-driver' },
      { name: 'eks-pod-identity-agent' },
    ],
  });
  const addon = (name: string) => s.one('aws_eks_addon', 'addon_name', name);
  const system = s.one('aws_eks_node_group', 'node_group_name', 'system');
  const gpu = s.one('aws_eks_node_group', 'node_group_name', 'gpu-a10g');

  it('installs every configured add-on on the cluster, pinning versions where given', () => {
    expect(
      s
        .all('aws_eks_addon')
        .map((a) => a.addon_name)
        .sort(),
    ).toEqual(['aws-ebs-csi-driver', 'coredns', 'eks-pod-identity-agent', 'kube-proxy', 'vpc-cni']);
    const clusterRef = refOf(s, 'aws_eks_cluster', s.all('aws_eks_cluster')[0] as Record<string, unknown>);
    for (const a of s.all('aws_eks_addon')) expect(a.cluster_name).toBe(`\${${clusterRef}.name}`);
    expect(addon('vpc-cni').addon_version).toBe('v1.20.4-eksbuild.1');
    expect(addon('coredns').addon_version).toBeUndefined();
  });

  it('gives the EBS CSI driver its IRSA role', () => {
    const role = s.one('aws_iam_role', 'name', 'strata-ebs-csi');
    expect(addon('aws-ebs-csi-driver').service_account_role_arn).toBe(
      `\${${refOf(s, 'aws_iam_role', role)}.arn}`,
    );
  });

  it('creates node prerequisites before the nodes and Deployment-based add-ons after the system nodes', () => {
    for (const name of ['vpc-cni', 'kube-proxy', 'eks-pod-identity-agent']) {
      const ref = refOf(s, 'aws_eks_addon', addon(name));
      expect(system.depends_on).toContain(ref);
      expect(gpu.depends_on).toContain(ref);
    }
    const systemRef = refOf(s, 'aws_eks_node_group', system);
    expect(addon('coredns').depends_on).toEqual([systemRef]);
    expect(addon('aws-ebs-csi-driver').depends_on).toEqual([systemRef]);
  });
});

describe('NVIDIA device plugin', () => {
  const s = synth();

  it('installs the device plugin chart as a Helm release pinned to a version', () => {
    expect(
      Testing.toHaveResourceWithProperties(s.json, 'helm_release', {
        name: 'nvidia-device-plugin',
        chart: 'nvidia-device-plugin',
        repository: 'https://nvidia.github.io/k8s-device-plugin',
        version: '0.18.2',
        namespace: 'kube-system',
      }),
    ).toBe(true);
  });

  it('schedules only on AL2023 GPU nodes, tolerating their taint', () => {
    const release = s.one('helm_release', 'name', 'nvidia-device-plugin') as { values: string[] };
    const values = parse(release.values[0] as string);
    expect(values.tolerations).toContainEqual({
      key: 'nvidia.com/gpu',
      operator: 'Exists',
      effect: 'NoSchedule',
    });
    expect(
      values.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms,
    ).toEqual([
      {
        matchExpressions: [
          { key: 'strata.dev/gpu', operator: 'In', values: ['true'] },
          { key: 'strata.dev/gpu-ami', operator: 'In', values: ['al2023'] },
        ],
      },
    ]);
  });

  it('reaches the cluster with its endpoint, CA and a short-lived aws eks get-token', () => {
    const clusterRef = refOf(s, 'aws_eks_cluster', s.all('aws_eks_cluster')[0] as Record<string, unknown>);
    expect(s.provider.helm).toEqual([
      {
        kubernetes: {
          host: `\${${clusterRef}.endpoint}`,
          cluster_ca_certificate: `\${base64decode(${clusterRef}.certificate_authority[0].data)}`,
          exec: {
            api_version: 'client.authentication.k8s.io/v1beta1',
            command: 'aws',
            args: ['eks', 'get-token', '--cluster-name', `\${${clusterRef}.name}`, '--region', 'us-west-2'],
          },
        },
      },
    ]);
  });

  it('is left out when disabled, or when every GPU group runs Bottlerocket (which ships its own)', () => {
    const releases = (x: Synthesized) => x.all('helm_release').map((r) => r.name);
    expect(releases(s)).toContain('nvidia-device-plugin');
    expect(releases(synth({ nvidiaDevicePlugin: { enabled: false } }))).not.toContain('nvidia-device-plugin');
    const bottlerocketGroups = [
      { name: 'l4', instanceTypes: ['g6.xlarge'], amiType: 'BOTTLEROCKET_x86_64_NVIDIA' as const },
    ];
    expect(releases(synth({ gpuNodeGroups: bottlerocketGroups }))).not.toContain('nvidia-device-plugin');
    // With no release at all, no Helm provider either (it would need a reachable cluster to plan).
    const bare = synth({
      gpuNodeGroups: bottlerocketGroups,
      karpenter: { enabled: false },
      loadBalancerController: { enabled: false },
    });
    expect(bare.resource.helm_release).toBeUndefined();
    expect(bare.provider.helm).toBeUndefined();
  });
});
