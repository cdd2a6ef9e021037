// The models the load tests serve, found as the harness and `up` find them (src/platform.ts). A
// missing one skips the tests that need it, saying so, or fails them under STRATA_REQUIRE_MODELS=1
// (the rule of @strata/common/testing's missingTestModel).
import { missingTestModel, type OptionalModel } from '@strata/common/testing';
import { DEFAULT_MODEL_FILE, defaultModelDir, FALLBACK_MODEL, fastModelDir } from '../../src/platform.js';

/** The model startHarness serves: tinystories-656k (fastModelDir). */
export function harnessModel(): OptionalModel {
  const path = fastModelDir();
  if (path) return { path, skipped: '' };
  return missingTestModel(FALLBACK_MODEL, 'not in STRATA_MODEL_DIR, STRATA_MODELS_DIR or ../shared/models');
}

/** The model `up` serves: the fetched SmolLM2 GGUF, else tinystories-656k (defaultModelDir). */
export function platformModel(): OptionalModel {
  const path = defaultModelDir();
  if (path) return { path, skipped: '' };
  return missingTestModel(
    `${DEFAULT_MODEL_FILE} or ${FALLBACK_MODEL}`,
    'not in STRATA_MODEL_DIR, STRATA_SMOLLM2_GGUF, .toolchain/models, STRATA_MODELS_DIR or ../shared/models',
  );
}
