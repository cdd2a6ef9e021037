import { Testing } from 'cdktf';
import { describe, expect, it } from 'vitest';
import { refOf, synth } from './helpers.js';

describe('EKS cluster', () => {
  const s = synth({ kubernetesVersion: '1.33' });
  const cluster = s.all('aws_eks_cluster')[0] as Record<string, unknown>;
  const clusterRef = refOf(s, 'aws_eks_cluster', cluster);

  it('runs the configured version in the private subnets, with both endpoints by default', () => {
    expect(s.all('aws_eks_cluster')).toHaveLength(1);
    expect(cluster.name).toBe('strata');
    expect(cluster.version).toBe('1.33');
    const vpc = cluster.vpc_config as Record<string, unknown>;
    expect(vpc.endpoint_private_access).toBe(true);
    expect(vpc.endpoint_public_access).toBe(true);
    expect(vpc.public_access_cidrs).toEqual(['0.0.0.0/0']);
    expect(vpc.subnet_ids).toHaveLength(3);
    for (const id of vpc.subnet_ids as string[]) expect(id).toMatch(/^\$\{aws_subnet\.network_private-/);
  });

  it('can keep the API endpoint private', () => {
    const priv = synth({ endpoint: { publicAccess: false } });
    const vpc = (priv.all('aws_eks_cluster')[0] as Record<string, Record<string, unknown>>).vpc_config;
    expect(vpc).toMatchObject({ endpoint_private_access: true, endpoint_public_access: false });
    expect(vpc?.public_access_cidrs).toBeUndefined();
  });

  it('registers the cluster OIDC issuer as an IAM identity provider for sts', () => {
    expect(
      Testing.toHaveResourceWithProperties(s.json, 'aws_iam_openid_connect_provider', {
        url: `\${${clusterRef}.identity[0].oidc[0].issuer}`,
        client_id_list: ['sts.amazonaws.com'],
      }),
    ).toBe(true);
  });

  it('gives the cluster role the EKS cluster policy before the cluster is created', () => {
    const attachment = s.one(
      'aws_iam_role_policy_attachment',
      'policy_arn',
      'arn:aws:iam::aws:policy/AmazonEKSClusterPolicy',
    );
    expect(cluster.depends_on).toContain(refOf(s, 'aws_iam_role_policy_attachment', attachment));
  });

  it('writes state next to the package by default and to S3 when configured', () => {
    expect(s.terraform.backend).toEqual({ local: { path: '../../../terraform.strata.tfstate' } });
    const remote = synth({ stateBackend: { bucket: 'acme-tfstate' } });
    expect(remote.terraform.backend).toEqual({
      s3: {
        bucket: 'acme-tfstate',
        key: 'strata/eks.tfstate',
        region: 'us-west-2',
        encrypt: true,
        use_lockfile: true,
      },
    });
  });

  it('pins the AWS provider region and tags every resource', () => {
    expect(s.provider.aws).toEqual([
      { region: 'us-west-2', default_tags: [{ tags: { project: 'strata' } }] },
    ]);
  });
});

describe('node groups', () => {
  const s = synth({
    gpuNodeGroups: [
      { name: 'a10g', instanceTypes: ['g5.2xlarge'], minSize: 0, maxSize: 4, desiredSize: 1 },
      {
        name: 'h100',
        instanceTypes: ['p5.48xlarge'],
        minSize: 0,
        maxSize: 2,
        desiredSize: 0,
        diskSizeGiB: 500,
        capacityType: 'SPOT',
        amiType: 'BOTTLEROCKET_x86_64_NVIDIA',
        labels: { 'team.example.com/owner': 'ml' },
      },
    ],
  });
  const system = s.one('aws_eks_node_group', 'node_group_name', 'system');
  const a10g = s.one('aws_eks_node_group', 'node_group_name', 'a10g');
  const h100 = s.one('aws_eks_node_group', 'node_group_name', 'h100');

  it('creates the system group untainted, on the standard AMI', () => {
    expect(system).toMatchObject({
      instance_types: ['m6i.large'],
      ami_type: 'AL2023_x86_64_STANDARD',
      disk_size: 50,
      scaling_config: { min_size: 2, max_size: 4, desired_size: 2 },
      labels: { 'strata.dev/node-role': 'system' },
    });
    expect(system.taint).toBeUndefined();
  });

  it('creates each GPU group with its scaling, AMI, disk and capacity type', () => {
    expect(s.all('aws_eks_node_group')).toHaveLength(3);
    expect(a10g).toMatchObject({
      instance_types: ['g5.2xlarge'],
      ami_type: 'AL2023_x86_64_NVIDIA',
      capacity_type: 'ON_DEMAND',
      disk_size: 200,
      scaling_config: { min_size: 0, max_size: 4, desired_size: 1 },
    });
    expect(h100).toMatchObject({
      instance_types: ['p5.48xlarge'],
      ami_type: 'BOTTLEROCKET_x86_64_NVIDIA',
      capacity_type: 'SPOT',
      disk_size: 500,
      scaling_config: { min_size: 0, max_size: 2, desired_size: 0 },
    });
  });

  it('labels GPU nodes for the chart and taints them NoSchedule', () => {
    expect(a10g.labels).toEqual({
      'strata.dev/gpu': 'true',
      'strata.dev/node-group': 'a10g',
      'strata.dev/node-role': 'gpu',
      'strata.dev/gpu-ami': 'al2023',
      'strata.dev/gpu-family': 'g5',
      'nvidia.com/gpu.product': 'NVIDIA-A10G',
      'nvidia.com/gpu.count': '1',
    });
    expect(h100.labels).toMatchObject({
      'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3',
      'nvidia.com/gpu.count': '8',
      'strata.dev/gpu-ami': 'bottlerocket',
      'team.example.com/owner': 'ml',
    });
    for (const group of [a10g, h100]) {
      expect(group.taint).toEqual([{ key: 'nvidia.com/gpu', value: 'true', effect: 'NO_SCHEDULE' }]);
    }
  });

  it('records the configured sizes as tags for gpu-scale.sh and leaves desired size to the autoscaler', () => {
    expect(a10g.tags).toEqual({
      'strata.dev/gpu': 'true',
      'strata.dev/min-size': '0',
      'strata.dev/desired-size': '1',
      'strata.dev/max-size': '4',
    });
    for (const group of [system, a10g, h100]) {
      expect(group.lifecycle).toEqual({ ignore_changes: ['scaling_config[0].desired_size'] });
    }
  });

  it('places nodes in the private subnets with the worker policies attached first', () => {
    const policies = s
      .all('aws_iam_role_policy_attachment')
      .filter((a) => String(a.role).includes('nodes_node-role'))
      .map((a) => String(a.policy_arn).split('/').pop());
    expect(policies.sort()).toEqual([
      'AmazonEC2ContainerRegistryReadOnly',
      'AmazonEKSWorkerNodePolicy',
      'AmazonEKS_CNI_Policy',
      'AmazonSSMManagedInstanceCore',
    ]);
    const cluster = s.all('aws_eks_cluster')[0] as { vpc_config: { subnet_ids: string[] } };
    for (const group of [system, a10g, h100]) {
      expect(group.subnet_ids).toEqual(cluster.vpc_config.subnet_ids);
      expect((group.depends_on as string[]).filter((d) => d.includes('node-role'))).toHaveLength(4);
    }
  });
});
