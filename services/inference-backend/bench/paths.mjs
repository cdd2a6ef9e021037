// Where the backend's benchmarks and tools find things: the package (its dist/, build/ and
// test/), the repository root (.toolchain, docs/benchmarks) and the default GGUF model.
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** services/inference-backend. */
export const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** The repository root. */
export const repo = resolve(pkg, '../..');
/** The default model, SmolLM2-135M-Instruct Q4_1, where `scripts/strata setup` fetches it. */
export const defaultGguf = join(repo, '.toolchain', 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf');
