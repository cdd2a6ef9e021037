// The hand-written contract of strata_native.node (native/addon/*.cpp). Keep in step with
// the C++ side: every function and field here exists there.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface NativeBuildInfo {
  napiVersion: number;
  /** The addon contains device code compiled by nvcc. */
  cuda: boolean;
  /** SM architectures compiled for, e.g. "80;89;90" (CUDA builds only). */
  cudaArchs?: string;
  /** nvcc release, e.g. "release 13.0" (CUDA builds only). */
  nvcc?: string;
  /** Host C++ compiler version string. */
  compiler: string;
}

export interface CudaDeviceInfo {
  index: number;
  name: string;
  /** e.g. "9.0" for Hopper. */
  computeCapability: string;
  totalMemoryBytes: number;
}

export interface CudaInfo {
  compiled: boolean;
  available: boolean;
  /** Why no device is usable, e.g. "no CUDA device: CUDA driver version is insufficient ...". */
  reason?: string;
  devices: CudaDeviceInfo[];
  /** A test kernel ran on device 0 and produced the expected values. */
  smokeKernelOk: boolean;
}

export interface NativeAddon {
  buildInfo(): NativeBuildInfo;
  cudaInfo(): CudaInfo;
}

const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Loads the addon from build/Release (or from STRATA_NATIVE_ADDON, a .node path). */
export function loadNativeAddon(path = process.env.STRATA_NATIVE_ADDON): NativeAddon {
  const file = path ?? join(packageRoot, 'build', 'Release', 'strata_native.node');
  return createRequire(import.meta.url)(file) as NativeAddon;
}
