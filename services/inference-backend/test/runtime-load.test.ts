// InferenceRuntime.load opens the tokenizer (and starts its encoding worker) and reads structured
// output's vocabulary while the engine loads on its native thread. Whichever of the two fails, the other is closed: no engine and no
// tokenizer worker outlive a failed load. The real engine on tinystories-656k.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '@strata/common';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { configEnv, configSchema } from '../src/config.js';
import { Engine } from '../src/engine/engine.js';
import { InferenceRuntime } from '../src/inference/runtime.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { loadNativeAddon } from '../src/native.js';
import { modelPath, optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');
const grammarBuilt = loadNativeAddon().buildInfo().grammar;

const config = (env: Record<string, string>) =>
  loadConfig({ schema: configSchema, envMap: configEnv, env: { STRATA_ENGINE_THREADS: '1', ...env } });

const dirs: string[] = [];
afterEach(() => {
  vi.restoreAllMocks();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!tiny.path)(`InferenceRuntime.load${tiny.skipped}`, () => {
  it("loads the tokenizer and structured output's vocabulary beside the engine, and uses both", async () => {
    const opened = vi.spyOn(Tokenizer, 'open');
    const read = vi.spyOn(Engine, 'loadGrammar');
    // How many tokenizers and grammar reads had been asked for by the time the engine had loaded.
    let beforeEngine = [-1, -1];
    const load = Engine.load.bind(Engine);
    vi.spyOn(Engine, 'load').mockImplementation(async (...args) => {
      const engine = await load(...args);
      beforeEngine = [opened.mock.calls.length, read.mock.calls.length];
      return engine;
    });
    const runtime = await InferenceRuntime.load(config({ STRATA_MODEL_DIR: modelPath('tinystories-656k') }));
    try {
      expect(beforeEngine).toEqual([1, 1]);
      expect(opened).toHaveBeenCalledTimes(1);
      expect(runtime.tokenizer.worker).not.toBeNull();
      expect(await runtime.tokenizer.encode('Once upon a time')).not.toHaveLength(0);
      if (!grammarBuilt) {
        expect(runtime.grammar).toMatchObject({ available: false, code: 'STRATA_GRAMMAR_UNAVAILABLE' });
        return;
      }
      expect(runtime.grammar).toMatchObject({
        available: true,
        version: expect.stringMatching(/llguidance/),
      });
      // The engine took it: a constraint compiles against it.
      const c = await runtime.engine.compileConstraint('regex', '[a-z ]{1,20}');
      expect(c.compileSeconds).toBeGreaterThanOrEqual(0);
    } finally {
      await runtime.close();
    }
  }, 60_000);

  it('closes the tokenizer when the engine cannot load, and reports the engine error', async () => {
    const closed = vi.spyOn(Tokenizer.prototype, 'close');
    // 4 blocks of 16 tokens cannot hold the model's context: STRATA_KV_CAPACITY at load.
    const failing = InferenceRuntime.load(
      config({ STRATA_MODEL_DIR: modelPath('tinystories-656k'), STRATA_KV_CACHE_BLOCKS: '4' }),
    );
    await expect(failing).rejects.toMatchObject({ code: 'STRATA_KV_CAPACITY' });
    expect(closed).toHaveBeenCalledTimes(1);
  }, 60_000);

  it('closes the engine when the tokenizer cannot load, and reports the tokenizer error', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'strata-runtime-'));
    dirs.push(dir);
    cpSync(modelPath('tinystories-656k'), dir, { recursive: true });
    // The model's tokenizer.json with a model type the tokenizers library does not know: the
    // file checks pass (they read the vocabulary), the library refuses it.
    const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'));
    json.model.type = 'NoSuchModel';
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(json));
    const closed = vi.spyOn(Engine.prototype, 'close');
    const failing = InferenceRuntime.load(config({ STRATA_MODEL_DIR: dir }));
    await expect(failing).rejects.toMatchObject({ code: 'STRATA_MODEL_FILES', message: /cannot be loaded/ });
    expect(closed).toHaveBeenCalledTimes(1);
  }, 60_000);
});
