// The GPU instance families the Strata engine can run on. The CUDA build targets sm_80, sm_89 and
// sm_90 (cubins also run on later minors of the same major, so sm_86 A10G runs sm_80 code); older
// families such as g4dn (T4, sm_75) and p3 (V100, sm_70) are rejected at config load.

export interface GpuFamily {
  /** Value of the `nvidia.com/gpu.product` label as NVIDIA's GPU feature discovery writes it. */
  product: string;
  /** CUDA compute capability, e.g. "8.6". */
  computeCapability: string;
  /** Memory of one GPU, GiB. */
  gpuMemoryGiB: number;
  /** GPUs per instance, by instance size (the part after the dot). */
  gpusBySize: Readonly<Record<string, number>>;
}

// g5/g6/g6e share one size ladder: one GPU up to 16xlarge, four at 12x/24x, eight at 48xlarge.
const gLadder = {
  xlarge: 1,
  '2xlarge': 1,
  '4xlarge': 1,
  '8xlarge': 1,
  '16xlarge': 1,
  '12xlarge': 4,
  '24xlarge': 4,
  '48xlarge': 8,
} as const;

export const GPU_FAMILIES: Readonly<Record<string, GpuFamily>> = {
  g5: { product: 'NVIDIA-A10G', computeCapability: '8.6', gpuMemoryGiB: 24, gpusBySize: gLadder },
  g6: { product: 'NVIDIA-L4', computeCapability: '8.9', gpuMemoryGiB: 24, gpusBySize: gLadder },
  g6e: { product: 'NVIDIA-L40S', computeCapability: '8.9', gpuMemoryGiB: 48, gpusBySize: gLadder },
  p4d: {
    product: 'NVIDIA-A100-SXM4-40GB',
    computeCapability: '8.0',
    gpuMemoryGiB: 40,
    gpusBySize: { '24xlarge': 8 },
  },
  p4de: {
    product: 'NVIDIA-A100-SXM4-80GB',
    computeCapability: '8.0',
    gpuMemoryGiB: 80,
    gpusBySize: { '24xlarge': 8 },
  },
  p5: {
    product: 'NVIDIA-H100-80GB-HBM3',
    computeCapability: '9.0',
    gpuMemoryGiB: 80,
    gpusBySize: { '4xlarge': 1, '48xlarge': 8 },
  },
  p5e: { product: 'NVIDIA-H200', computeCapability: '9.0', gpuMemoryGiB: 141, gpusBySize: { '48xlarge': 8 } },
  p5en: {
    product: 'NVIDIA-H200',
    computeCapability: '9.0',
    gpuMemoryGiB: 141,
    gpusBySize: { '48xlarge': 8 },
  },
};

export interface GpuInstance {
  instanceType: string;
  family: string;
  gpus: number;
  spec: GpuFamily;
}

/** Resolves "g6e.2xlarge" to its family and GPU count, or returns a message saying what is allowed. */
export function describeGpuInstance(instanceType: string): GpuInstance | string {
  const [family = '', size = '', ...rest] = instanceType.split('.');
  const spec = GPU_FAMILIES[family];
  if (!spec || rest.length > 0) {
    return (
      `"${instanceType}" is not a supported GPU instance type; supported families: ` +
      `${Object.keys(GPU_FAMILIES).join(', ')} (the engine needs compute capability 8.0 or newer)`
    );
  }
  const gpus = spec.gpusBySize[size];
  if (gpus === undefined) {
    return `"${instanceType}": ${family} comes in sizes ${Object.keys(spec.gpusBySize).join(', ')}`;
  }
  return { instanceType, family, gpus, spec };
}
