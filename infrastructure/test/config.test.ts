import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InfraConfigError, loadInfraConfig, parseInfraConfig } from '../src/config/load.js';

function problemsOf(doc: unknown): string[] {
  try {
    parseInfraConfig(doc);
  } catch (err) {
    if (err instanceof InfraConfigError) return err.problems;
    throw err;
  }
  throw new Error('expected the configuration to be rejected');
}

describe('infrastructure configuration', () => {
  it('fills every default from an empty document: three AZs of the region and one A10G group', () => {
    const config = parseInfraConfig({});
    expect(config.region).toBe('us-west-2');
    expect(config.clusterName).toBe('strata');
    expect(config.kubernetesVersion).toBe('1.34');
    expect(config.network.availabilityZones).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2c']);
    expect(config.network.natGateways).toBe('single');
    expect(config.systemNodeGroup).toMatchObject({
      instanceTypes: ['m6i.large'],
      minSize: 2,
      maxSize: 4,
      desiredSize: 2,
    });
    expect(config.gpuNodeGroups).toEqual([
      {
        name: 'gpu-a10g',
        instanceTypes: ['g5.xlarge'],
        minSize: 0,
        maxSize: 2,
        desiredSize: 1,
        diskSizeGiB: 200,
        amiType: 'AL2023_x86_64_NVIDIA',
        capacityType: 'ON_DEMAND',
        labels: {},
      },
    ]);
    expect(config.addons.map((a) => a.name)).toEqual([
      'vpc-cni',
      'coredns',
      'kube-proxy',
      'aws-ebs-csi-driver',
      'eks-pod-identity-agent',
    ]);
    expect(config.irsa.router.enabled).toBe(false);
    expect(config.irsa.modelReader).toEqual({
      enabled: false,
      namespace: 'strata',
      serviceAccount: 'strata-backend',
      prefix: '',
    });
    expect(config.irsa.clusterAutoscaler).toMatchObject({ enabled: false, namespace: 'kube-system' });
    expect(config.loadBalancerController).toEqual({ enabled: true, chartVersion: '3.5.0' });
    expect(config.karpenter).toEqual({
      enabled: true,
      chartVersion: '1.14.1',
      amiVersions: { al2023: 'latest', bottlerocket: 'latest' },
      gpuInstanceStorePolicy: 'RAID0',
      gpuConsolidateAfter: '15m',
      systemPool: { enabled: true, maxCpu: 64, consolidateAfter: '5m' },
    });
    expect(config.nvidiaDevicePlugin).toEqual({
      enabled: true,
      chartVersion: '0.18.2',
      namespace: 'kube-system',
    });
  });

  it('derives the AZs from a non-default region', () => {
    expect(parseInfraConfig({ region: 'eu-central-1' }).network.availabilityZones).toEqual([
      'eu-central-1a',
      'eu-central-1b',
      'eu-central-1c',
    ]);
  });

  it('rejects a group whose minSize exceeds maxSize, naming the group', () => {
    const problems = problemsOf({
      gpuNodeGroups: [{ name: 'h100', instanceTypes: ['p5.48xlarge'], minSize: 3, maxSize: 2 }],
    });
    expect(problems).toEqual(['gpuNodeGroups.0: minSize (3) is greater than maxSize (2)']);
  });

  it('rejects a desired size outside [min, max], on the system group too', () => {
    expect(problemsOf({ systemNodeGroup: { minSize: 2, maxSize: 4, desiredSize: 5 } })).toEqual([
      'systemNodeGroup: desiredSize (5) must lie between minSize (2) and maxSize (4)',
    ]);
  });

  it('rejects fewer than three AZs and AZs of another region', () => {
    expect(problemsOf({ network: { availabilityZones: ['us-west-2a', 'us-west-2b'] } })).toEqual([
      expect.stringMatching(/^network\.availabilityZones: needs exactly three AZs .* got 2$/),
    ]);
    expect(
      problemsOf({ network: { availabilityZones: ['us-west-2a', 'us-west-2b', 'us-east-1c'] } }),
    ).toEqual(['network.availabilityZones.2: "us-east-1c" is not an AZ of region us-west-2']);
  });

  it('rejects unknown and unsupported GPU instance families and unknown sizes, listing what is allowed', () => {
    const [unknown, old, size] = problemsOf({
      gpuNodeGroups: [
        { name: 'a', instanceTypes: ['x9.large'] },
        { name: 'b', instanceTypes: ['g4dn.xlarge'] },
        { name: 'c', instanceTypes: ['p5.2xlarge'] },
      ],
    });
    expect(unknown).toMatch(
      /^gpuNodeGroups\.0\.instanceTypes\.0: "x9\.large" is not a supported GPU instance type; supported families: g5, g6, g6e, p4d, p4de, p5, p5e, p5en/,
    );
    expect(old).toMatch(/^gpuNodeGroups\.1\.instanceTypes\.0: "g4dn\.xlarge" is not a supported/);
    expect(size).toBe('gpuNodeGroups.2.instanceTypes.0: "p5.2xlarge": p5 comes in sizes 4xlarge, 48xlarge');
  });

  it('rejects a group mixing GPU models or GPU counts', () => {
    expect(
      problemsOf({ gpuNodeGroups: [{ name: 'mix', instanceTypes: ['g5.xlarge', 'g6.xlarge'] }] }),
    ).toEqual([expect.stringContaining('one node group needs one GPU model and count')]);
    expect(
      problemsOf({ gpuNodeGroups: [{ name: 'mix', instanceTypes: ['g6e.xlarge', 'g6e.12xlarge'] }] }),
    ).toEqual([expect.stringContaining('NVIDIA-L40S x1, NVIDIA-L40S x4')]);
  });

  it('reports every bad field at once, and unknown keys (typos) too', () => {
    const problems = problemsOf({
      clusterName: 'Strata_Prod',
      kubernetesVersion: 1.3,
      gpuNodeGroup: [],
      gpuNodeGroups: [{ name: 'g', instanceTypes: ['g5.xlarge'], amiType: 'AL2_x86_64_GPU' }],
    });
    expect(problems.map((p) => p.split(':')[0]).sort()).toEqual([
      '(root)',
      'clusterName',
      'gpuNodeGroups.0.amiType',
      'kubernetesVersion',
    ]);
    expect(problems.find((p) => p.startsWith('(root)'))).toContain('gpuNodeGroup');
  });

  it('rejects duplicate GPU group names and the reserved name "system"', () => {
    expect(
      problemsOf({
        gpuNodeGroups: [
          { name: 'system', instanceTypes: ['g5.xlarge'] },
          { name: 'l4', instanceTypes: ['g6.xlarge'] },
          { name: 'l4', instanceTypes: ['g6.2xlarge'] },
        ],
      }),
    ).toEqual([
      'gpuNodeGroups.0.name: "system" is used twice (or is reserved)',
      'gpuNodeGroups.2.name: "l4" is used twice (or is reserved)',
    ]);
  });

  it('refuses the cluster autoscaler next to Karpenter: both would add nodes for the same pods', () => {
    expect(problemsOf({ irsa: { clusterAutoscaler: { enabled: true } } })).toEqual([
      'irsa.clusterAutoscaler.enabled: the cluster autoscaler and Karpenter would both add nodes for the same pending pods; disable one (karpenter.enabled: false to keep the autoscaler)',
    ]);
    expect(
      parseInfraConfig({ karpenter: { enabled: false }, irsa: { clusterAutoscaler: { enabled: true } } }).irsa
        .clusterAutoscaler.enabled,
    ).toBe(true);
  });

  it('checks Karpenter durations, AMI release pins and chart versions', () => {
    expect(
      problemsOf({
        karpenter: {
          chartVersion: '1.14',
          gpuConsolidateAfter: '15 minutes',
          amiVersions: { al2023: 'v1.20.4', bottlerocket: 'v20240807' },
          systemPool: { maxCpu: 0 },
        },
        loadBalancerController: { chartVersion: 'latest' },
        gpuNodeGroups: [{ name: 'l4', instanceTypes: ['g6.xlarge'], karpenterMaxNodes: -1 }],
      }).map((p) => p.split(':')[0]),
    ).toEqual([
      'gpuNodeGroups.0.karpenterMaxNodes',
      'loadBalancerController.chartVersion',
      'karpenter.chartVersion',
      'karpenter.amiVersions.al2023',
      'karpenter.amiVersions.bottlerocket',
      'karpenter.gpuConsolidateAfter',
      'karpenter.systemPool.maxCpu',
    ]);
    const pinned = parseInfraConfig({
      karpenter: {
        amiVersions: { al2023: 'v20240807', bottlerocket: 'v1.20.4' },
        gpuConsolidateAfter: '1h30m',
      },
    }).karpenter;
    expect(pinned.amiVersions).toEqual({ al2023: 'v20240807', bottlerocket: 'v1.20.4' });
    expect(pinned.gpuConsolidateAfter).toBe('1h30m');
  });

  it('loads a YAML file named by STRATA_INFRA_CONFIG and lets the environment override the region', () => {
    const dir = mkdtempSync(join(tmpdir(), 'strata-infra-'));
    const file = join(dir, 'prod.yaml');
    writeFileSync(
      file,
      [
        'clusterName: strata-prod',
        'kubernetesVersion: "1.33"',
        'gpuNodeGroups:',
        '  - name: l40s',
        '    instanceTypes: [g6e.2xlarge]',
        '    maxSize: 6',
      ].join('\n'),
    );
    const config = loadInfraConfig({
      env: { STRATA_INFRA_CONFIG: file, STRATA_INFRA_REGION: 'us-east-1' },
    });
    expect(config.clusterName).toBe('strata-prod');
    expect(config.kubernetesVersion).toBe('1.33');
    expect(config.region).toBe('us-east-1');
    expect(config.network.availabilityZones[0]).toBe('us-east-1a');
    expect(config.gpuNodeGroups[0]).toMatchObject({ name: 'l40s', maxSize: 6, minSize: 0, desiredSize: 1 });
  });

  it('names the file and the environment variable in its errors', () => {
    expect(() => loadInfraConfig({ file: '/nonexistent/strata.yaml', env: {} })).toThrow(
      /invalid infrastructure configuration \(\/nonexistent\/strata\.yaml\):\n {2}- cannot read the file/,
    );
    expect(() => loadInfraConfig({ env: { STRATA_INFRA_KUBERNETES_VERSION: 'latest' } })).toThrow(
      'kubernetesVersion (env STRATA_INFRA_KUBERNETES_VERSION): must be an EKS minor version',
    );
  });
});
