// Builds strata_native.node with cmake-js (offline: Node-API headers come from the
// node-api-headers package). STRATA_CUDA_HOME selects a CUDA build; unset means CPU-only.
// Structured output's llguidance is built with cargo unless STRATA_GRAMMAR=off.
//   node scripts/build-native.mjs [--out DIR] [--cpu-only] [--target strata_native]
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
    // One CMake target (e.g. strata_native without the engine's test executables).
    target: { type: 'string' },
  },
});
const cudaHome = values['cpu-only'] ? '' : (process.env.STRATA_CUDA_HOME ?? '');
const cmakeJs = join(root, 'node_modules', 'cmake-js', 'bin', 'cmake-js');
// Configure every time: `cmake-js compile` alone would keep a build dir's old cache, e.g. a
// CPU-only configuration after STRATA_CUDA_HOME was set. An unchanged reconfigure takes ~1 s.
const common = ['--directory', root, '--out', resolve(values.out), '--config', 'Release'];
console.log(`[build-native] ${cudaHome ? `CUDA build with ${cudaHome}` : 'CPU-only build'} -> ${values.out}`);
let result;
for (const step of [
  [
    'configure',
    ...common,
    `--CDSTRATA_CUDA_HOME=${cudaHome}`,
    // STRATA_GRAMMAR=off: no structured output (scripts/lib/toolchain.sh sets it without cargo).
    `--CDSTRATA_GRAMMAR=${process.env.STRATA_GRAMMAR === 'off' ? 'OFF' : 'ON'}`,
  ],
  ['build', ...common, ...(values.target ? ['--target', values.target] : [])],
]) {
  result = spawnSync(process.execPath, [cmakeJs, ...step], {
    stdio: 'inherit',
    env: { ...process.env, CMAKE_BUILD_PARALLEL_LEVEL: String(availableParallelism()) },
  });
  if (result.status !== 0) break;
}
process.exit(result?.status ?? 1);
