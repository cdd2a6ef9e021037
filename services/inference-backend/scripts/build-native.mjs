// Builds strata_native.node with cmake-js (offline: Node-API headers come from the
// node-api-headers package). STRATA_CUDA_HOME selects a CUDA build; unset means CPU-only.
//   node scripts/build-native.mjs [--out DIR] [--cpu-only]
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: {
    out: { type: 'string', default: join(root, 'build') },
    'cpu-only': { type: 'boolean', default: false },
  },
});
const cudaHome = values['cpu-only'] ? '' : (process.env.STRATA_CUDA_HOME ?? '');
const cmakeJs = join(root, 'node_modules', 'cmake-js', 'bin', 'cmake-js');
const args = [
  cmakeJs,
  'compile',
  '--directory',
  root,
  '--out',
  resolve(values.out),
  '--config',
  'Release',
  `--CDSTRATA_CUDA_HOME=${cudaHome}`,
];
console.log(`[build-native] ${cudaHome ? `CUDA build with ${cudaHome}` : 'CPU-only build'} -> ${values.out}`);
const result = spawnSync(process.execPath, args, {
  stdio: 'inherit',
  env: { ...process.env, CMAKE_BUILD_PARALLEL_LEVEL: String(availableParallelism()) },
});
process.exit(result.status ?? 1);
