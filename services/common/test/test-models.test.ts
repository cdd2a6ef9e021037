// The rule every package's model tests follow: a missing test model skips them, naming the model
// and why, except under STRATA_REQUIRE_MODELS=1 (CI), where it is an error instead.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { missingTestModel, optionalTestModel, testModelDir } from '../src/testing/process.js';

const models = mkdtempSync(join(tmpdir(), 'strata-test-models-'));
mkdirSync(join(models, 'tinystories-656k'));
afterAll(() => rmSync(models, { recursive: true, force: true }));
afterEach(() => vi.unstubAllEnvs());

describe('optionalTestModel', () => {
  it('finds a model in STRATA_MODELS_DIR, whatever STRATA_REQUIRE_MODELS says', () => {
    vi.stubEnv('STRATA_MODELS_DIR', models);
    const found = { path: join(models, 'tinystories-656k'), skipped: '' };
    expect(optionalTestModel()).toEqual(found);
    vi.stubEnv('STRATA_REQUIRE_MODELS', '1');
    expect(optionalTestModel('tinystories-656k')).toEqual(found);
    expect(testModelDir()).toBe(found.path);
  });

  it('skips, naming the model and why, when it is missing', () => {
    vi.stubEnv('STRATA_MODELS_DIR', undefined);
    vi.stubEnv('STRATA_REQUIRE_MODELS', undefined);
    expect(optionalTestModel()).toEqual({
      path: undefined,
      skipped: ' (skipped: tinystories-656k not found: STRATA_MODELS_DIR is not set)',
    });
    vi.stubEnv('STRATA_MODELS_DIR', models);
    expect(optionalTestModel('stories260K')).toEqual({
      path: undefined,
      skipped: ` (skipped: stories260K not found: not in STRATA_MODELS_DIR (${models}))`,
    });
    expect(() => testModelDir('stories260K')).toThrow(
      `stories260K not found: not in STRATA_MODELS_DIR (${models})`,
    );
  });

  it('fails instead of skipping under STRATA_REQUIRE_MODELS=1', () => {
    vi.stubEnv('STRATA_MODELS_DIR', undefined);
    vi.stubEnv('STRATA_REQUIRE_MODELS', '1');
    expect(() => optionalTestModel()).toThrow(
      'tinystories-656k not found: STRATA_MODELS_DIR is not set, and STRATA_REQUIRE_MODELS=1 makes that a failure',
    );
    expect(() => missingTestModel('SmolLM2', 'STRATA_SMOLLM2_GGUF is not set')).toThrow(
      'SmolLM2 not found: STRATA_SMOLLM2_GGUF is not set, and STRATA_REQUIRE_MODELS=1 makes that a failure',
    );
  });
});
