// The typed shape of one Strata EKS environment. Every field has a default that gives a working
// single-model cluster (one A10G node), so an empty file is a valid configuration; cross-field rules
// (min <= desired <= max, three AZs in the region, supported GPU families) live in refine().
import { z } from 'zod';
import { describeGpuInstance } from './gpu-instances.js';

const dnsLabel = z
  .string()
  // 38 characters leaves room for suffixes such as "-cluster-autoscaler" in 64-character IAM role names.
  .regex(/^[a-z][a-z0-9-]{0,37}$/, 'use 1-38 lowercase letters, digits and dashes, starting with a letter');

const k8sName = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'must be a Kubernetes name (lowercase, digits, dashes)');

/** A Go/Kubernetes duration as Karpenter accepts it, e.g. "30s", "15m", "1h30m". */
const duration = z.string().regex(/^([0-9]+(s|m|h))+$/, 'must be a duration such as 30s, 15m or 1h30m');

const chartVersion = z.string().regex(/^\d+\.\d+\.\d+$/, 'must be an exact chart version such as 1.2.3');

const cidr = z
  .string()
  .regex(
    /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/,
    'must be an IPv4 CIDR such as 10.0.0.0/16',
  );

/** Node counts of one managed node group; checked min <= desired <= max in refine(). */
const scaling = {
  minSize: z.number().int().min(0),
  maxSize: z.number().int().min(1),
  desiredSize: z.number().int().min(0),
};

type Problem = (path: (string | number)[], message: string) => void;

function checkSizes(g: { minSize: number; maxSize: number; desiredSize: number }, problem: Problem): void {
  if (g.minSize > g.maxSize) problem([], `minSize (${g.minSize}) is greater than maxSize (${g.maxSize})`);
  else if (g.desiredSize < g.minSize || g.desiredSize > g.maxSize) {
    problem(
      [],
      `desiredSize (${g.desiredSize}) must lie between minSize (${g.minSize}) and maxSize (${g.maxSize})`,
    );
  }
}

function checkGpuInstances(instanceTypes: string[], problem: Problem): void {
  const described = instanceTypes.map(describeGpuInstance);
  described.forEach((d, j) => {
    if (typeof d === 'string') problem(['instanceTypes', j], d);
  });
  const shapes = new Set(
    described.flatMap((d) => (typeof d === 'string' ? [] : [`${d.spec.product} x${d.gpus}`])),
  );
  if (shapes.size > 1) {
    problem(
      ['instanceTypes'],
      `one node group needs one GPU model and count (labels and autoscaler templates are per group); got ${[...shapes].join(', ')}`,
    );
  }
}

const reporter =
  (ctx: z.RefinementCtx): Problem =>
  (path, message) =>
    ctx.addIssue({ code: 'custom', path, message });

const systemNodeGroup = z
  .strictObject({
    instanceTypes: z.array(z.string().min(1)).min(1).default(['m6i.large']),
    minSize: scaling.minSize.default(2),
    maxSize: scaling.maxSize.default(4),
    desiredSize: scaling.desiredSize.default(2),
    /** Root volume, GiB. */
    diskSizeGiB: z.number().int().min(20).default(50),
    amiType: z
      .enum(['AL2023_x86_64_STANDARD', 'AL2023_ARM_64_STANDARD', 'BOTTLEROCKET_x86_64'])
      .default('AL2023_x86_64_STANDARD'),
  })
  .superRefine((g, ctx) => checkSizes(g, reporter(ctx)));

export const GPU_AMI_TYPES = ['AL2023_x86_64_NVIDIA', 'BOTTLEROCKET_x86_64_NVIDIA'] as const;

const gpuNodeGroup = z
  .strictObject({
    name: dnsLabel,
    instanceTypes: z.array(z.string().min(1)).min(1),
    minSize: scaling.minSize.default(0),
    maxSize: scaling.maxSize.default(2),
    desiredSize: scaling.desiredSize.default(1),
    /** Root volume, GiB: container images with CUDA plus model weights when not on a PVC. */
    diskSizeGiB: z.number().int().min(50).default(200),
    amiType: z.enum(GPU_AMI_TYPES).default('AL2023_x86_64_NVIDIA'),
    capacityType: z.enum(['ON_DEMAND', 'SPOT']).default('ON_DEMAND'),
    /** Extra node labels, merged over the ones the stack sets. */
    labels: z.record(z.string(), z.string()).default({}),
    /**
     * GPU nodes Karpenter may launch for this shape on top of the managed group (its NodePool's
     * limit); absent means maxSize, 0 means no NodePool for this group.
     */
    karpenterMaxNodes: z.number().int().min(0).optional(),
  })
  .superRefine((g, ctx) => {
    checkSizes(g, reporter(ctx));
    checkGpuInstances(g.instanceTypes, reporter(ctx));
  });

export const ADDON_NAMES = [
  'vpc-cni',
  'coredns',
  'kube-proxy',
  'aws-ebs-csi-driver',
  'eks-pod-identity-agent',
] as const;

const addon = z.strictObject({
  name: z.enum(ADDON_NAMES),
  /** e.g. "v1.19.2-eksbuild.1"; absent means the default version EKS picks for the cluster. */
  version: z.string().min(1).optional(),
});

const serviceAccountRole = (namespace: string, serviceAccount: string, enabled: boolean) =>
  z
    .strictObject({
      enabled: z.boolean().default(enabled),
      namespace: k8sName.default(namespace),
      serviceAccount: k8sName.default(serviceAccount),
      /** Managed or customer policy ARNs attached to the role. */
      policyArns: z.array(z.string().startsWith('arn:')).default([]),
    })
    .prefault({});

export const infraConfigSchema = z
  .strictObject({
    region: z
      .string()
      .regex(/^[a-z]{2}(-[a-z]+)+-\d$/, 'must be an AWS region such as us-west-2')
      .default('us-west-2'),
    clusterName: dnsLabel.default('strata'),
    kubernetesVersion: z
      .string()
      .regex(/^1\.\d{2}$/, 'must be an EKS minor version such as "1.34" (quote it in YAML)')
      .default('1.34'),
    /** Tags on every AWS resource that takes them. */
    tags: z.record(z.string(), z.string()).default({ project: 'strata' }),
    network: z
      .strictObject({
        vpcCidr: cidr.default('10.0.0.0/16'),
        /** Exactly the AZs to use; absent means <region>a, b and c. */
        availabilityZones: z.array(z.string()).optional(),
        /** "single" saves two NAT gateways (about 65 USD a month) at the price of one AZ's egress. */
        natGateways: z.enum(['single', 'perAz']).default('single'),
      })
      .prefault({}),
    endpoint: z
      .strictObject({
        privateAccess: z.boolean().default(true),
        publicAccess: z.boolean().default(true),
        publicAccessCidrs: z.array(cidr).min(1).default(['0.0.0.0/0']),
      })
      .prefault({}),
    systemNodeGroup: systemNodeGroup.prefault({}),
    gpuNodeGroups: z
      .array(gpuNodeGroup)
      .min(1, 'configure at least one GPU node group')
      .prefault([{ name: 'gpu-a10g', instanceTypes: ['g5.xlarge'] }]),
    addons: z.array(addon).default(ADDON_NAMES.map((name) => ({ name }))),
    irsa: z
      .strictObject({
        // Off by default: Karpenter scales the nodes (see the karpenter key); both at once would
        // each launch capacity for the same pending pods.
        clusterAutoscaler: serviceAccountRole('kube-system', 'cluster-autoscaler', false),
        router: serviceAccountRole('strata', 'strata-router', false),
        /**
         * Read-only access to the model bucket for the backends' fetch-model init container
         * (models[].source s3://...): s3:ListBucket on the bucket, s3:GetObject under the prefix.
         * The chart's backend ServiceAccount is "<release>-backend".
         */
        modelReader: z
          .strictObject({
            enabled: z.boolean().default(false),
            namespace: k8sName.default('strata'),
            serviceAccount: k8sName.default('strata-backend'),
            bucket: z
              .string()
              .regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'must be an S3 bucket name')
              .optional(),
            /** Only keys under this prefix ("" for the whole bucket), e.g. "models/". */
            prefix: z
              .string()
              .regex(/^$|^[^/].*\/$/, 'must be empty or a key prefix ending in "/", without a leading "/"')
              .default(''),
          })
          .prefault({}),
      })
      .prefault({}),
    /** AWS Load Balancer Controller: provisions the NLB for Envoy's LoadBalancer Service. */
    loadBalancerController: z
      .strictObject({
        enabled: z.boolean().default(true),
        /** Chart eks/aws-load-balancer-controller; its IAM policy here mirrors controller v3.5.0. */
        chartVersion: chartVersion.default('3.5.0'),
      })
      .prefault({}),
    /** Karpenter: GPU and system nodes on demand, next to the managed node groups. */
    karpenter: z
      .strictObject({
        enabled: z.boolean().default(true),
        /** Charts karpenter and karpenter-crd (same version); the IAM policy mirrors v1.14. */
        chartVersion: chartVersion.default('1.14.1'),
        /**
         * EKS-optimized AMI release per alias family; "latest" follows new releases (Karpenter then
         * replaces drifted nodes), a pinned release (AL2023 vYYYYMMDD, Bottlerocket vX.Y.Z) does not.
         */
        amiVersions: z
          .strictObject({
            al2023: z
              .string()
              .regex(/^(latest|v\d{8})$/, 'must be "latest" or an AL2023 release such as v20240807')
              .default('latest'),
            bottlerocket: z
              .string()
              .regex(
                /^(latest|v\d+\.\d+\.\d+)$/,
                'must be "latest" or a Bottlerocket release such as v1.20.4',
              )
              .default('latest'),
          })
          .prefault({}),
        /**
         * Instance-store NVMe of the GPU nodes: RAID0 makes one array of the instance's NVMe disks
         * and puts the kubelet's and containerd's storage on it, with the chart's node-local
         * model cache (backend.modelCache.hostPath, /mnt/k8s-disks/0 on AL2023); "none" leaves
         * the disks unused. Instance types without NVMe are unaffected.
         */
        gpuInstanceStorePolicy: z.enum(['RAID0', 'none']).default('RAID0'),
        /** How long a GPU node must be empty or underused before Karpenter removes or replaces it. */
        gpuConsolidateAfter: duration.default('15m'),
        /** A NodePool for untainted system/service pods when the system group is full. */
        systemPool: z
          .strictObject({
            enabled: z.boolean().default(true),
            /** vCPUs the pool may hold in total. */
            maxCpu: z.number().int().min(1).default(64),
            consolidateAfter: duration.default('5m'),
          })
          .prefault({}),
      })
      .prefault({}),
    nvidiaDevicePlugin: z
      .strictObject({
        enabled: z.boolean().default(true),
        chartVersion: z.string().default('0.18.2'),
        namespace: k8sName.default('kube-system'),
      })
      .prefault({}),
    /** Remote state; absent means local state in cdktf.out (fine for a trial, not for a team). */
    stateBackend: z
      .strictObject({
        bucket: z.string().min(3),
        key: z.string().min(1).default('strata/eks.tfstate'),
        region: z.string().optional(),
      })
      .optional(),
  })
  .superRefine((config, ctx) => {
    const problem = reporter(ctx);
    const seen = new Set<string>(['system']);
    config.gpuNodeGroups.forEach((g, i) => {
      if (seen.has(g.name))
        problem(['gpuNodeGroups', i, 'name'], `"${g.name}" is used twice (or is reserved)`);
      seen.add(g.name);
    });

    const azs = config.network.availabilityZones;
    if (azs) {
      if (new Set(azs).size !== azs.length) problem(['network', 'availabilityZones'], 'lists an AZ twice');
      if (azs.length !== 3) {
        problem(
          ['network', 'availabilityZones'],
          `needs exactly three AZs (node spread across failure domains; the subnet layout has three slots); got ${azs.length}`,
        );
      }
      azs.forEach((az, i) => {
        if (!new RegExp(`^${config.region}[a-z]$`).test(az)) {
          problem(['network', 'availabilityZones', i], `"${az}" is not an AZ of region ${config.region}`);
        }
      });
    }

    const prefix = Number(config.network.vpcCidr.split('/')[1]);
    if (prefix < 16 || prefix > 20)
      problem(['network', 'vpcCidr'], 'prefix must be /16 to /20 (AWS allows /16 at most)');

    if (config.karpenter.enabled && config.irsa.clusterAutoscaler.enabled) {
      problem(
        ['irsa', 'clusterAutoscaler', 'enabled'],
        'the cluster autoscaler and Karpenter would both add nodes for the same pending pods; disable one (karpenter.enabled: false to keep the autoscaler)',
      );
    }

    if (config.irsa.modelReader.enabled && !config.irsa.modelReader.bucket) {
      problem(['irsa', 'modelReader', 'bucket'], 'the model bucket is required when modelReader is enabled');
    }

    if (!config.endpoint.privateAccess && !config.endpoint.publicAccess) {
      problem(['endpoint'], 'privateAccess and publicAccess cannot both be false');
    }
  });

export type InfraConfigInput = z.input<typeof infraConfigSchema>;
/** Parsed configuration with defaults applied; availabilityZones is always filled in. */
export type InfraConfig = Omit<z.output<typeof infraConfigSchema>, 'network'> & {
  network: Omit<z.output<typeof infraConfigSchema>['network'], 'availabilityZones'> & {
    availabilityZones: string[];
  };
};
export type GpuNodeGroupConfig = InfraConfig['gpuNodeGroups'][number];
export type SystemNodeGroupConfig = InfraConfig['systemNodeGroup'];
