// Test models come from STRATA_MODELS_DIR (CI: ../shared/models), never from a path in code.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export function modelPath(name: string): string {
  const root = process.env.STRATA_MODELS_DIR;
  if (!root) {
    throw new Error(
      'STRATA_MODELS_DIR is not set: point it at the folder holding tinystories-656k/ (e.g. ../shared/models)',
    );
  }
  const dir = join(root, name);
  if (!existsSync(dir)) throw new Error(`model ${name} not found in STRATA_MODELS_DIR (${root})`);
  return dir;
}
