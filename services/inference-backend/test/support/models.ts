// Test models come from STRATA_MODELS_DIR (CI: ../shared/models), never from a path in code. A
// missing one skips the tests that need it, saying so, or fails them under STRATA_REQUIRE_MODELS=1
// (@strata/common/testing holds that rule for every package).
import { existsSync } from 'node:fs';
import { missingTestModel, type OptionalModel } from '@strata/common/testing';

export {
  type OptionalModel,
  optionalTestModel as optionalModel,
  testModelDir as modelPath,
} from '@strata/common/testing';

/** SmolLM2-135M-Instruct's Q4_1 GGUF file, from STRATA_SMOLLM2_GGUF (set by `scripts/strata test`). */
export function smollm2Gguf(): OptionalModel {
  const file = process.env.STRATA_SMOLLM2_GGUF;
  const name = 'SmolLM2-135M-Instruct Q4_1 GGUF';
  if (!file) return missingTestModel(name, 'STRATA_SMOLLM2_GGUF is not set');
  if (!existsSync(file)) return missingTestModel(name, `STRATA_SMOLLM2_GGUF=${file} does not exist`);
  return { path: file, skipped: '' };
}
