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

/** A model file or folder tests may use, or why it is missing (the test is then skipped, saying so). */
export interface OptionalModel {
  /** The path when it exists, else undefined. */
  path: string | undefined;
  /** '' when present, else ' (skipped: ...)', to append to a describe/it name. */
  skipped: string;
}

/** `name` (a path inside STRATA_MODELS_DIR, e.g. 'tinystories-656k-gguf/x.gguf'), when there. */
export function optionalModel(name: string): OptionalModel {
  const root = process.env.STRATA_MODELS_DIR;
  if (!root) return { path: undefined, skipped: ' (skipped: STRATA_MODELS_DIR is not set)' };
  const file = join(root, name);
  if (!existsSync(file))
    return { path: undefined, skipped: ` (skipped: ${name} is not in STRATA_MODELS_DIR)` };
  return { path: file, skipped: '' };
}

/** SmolLM2-135M-Instruct's Q4_1 GGUF file, from STRATA_SMOLLM2_GGUF (set by `scripts/strata test`). */
export function smollm2Gguf(): OptionalModel {
  const file = process.env.STRATA_SMOLLM2_GGUF;
  if (!file) return { path: undefined, skipped: ' (skipped: STRATA_SMOLLM2_GGUF is not set)' };
  if (!existsSync(file))
    return { path: undefined, skipped: ` (skipped: STRATA_SMOLLM2_GGUF=${file} does not exist)` };
  return { path: file, skipped: '' };
}
