import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelError } from '../src/model/errors.js';
import { loadModelFiles } from '../src/model/model-files.js';
import { modelPath, optionalModel } from './support/models.js';
import { copyTinystories, editJson, mergeJson, TempDirs, TINYSTORIES_FILES } from './support/temp-model.js';
import { rejected } from './support/thrown.js';

const tiny = optionalModel('tinystories-656k');

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

/** The ModelError `promise` rejects with (fails the test if it resolves or throws something else). */
const modelError = (promise: Promise<unknown>) => rejected(promise, ModelError);

describe.skipIf(!tiny.path)(`loadModelFiles on tinystories-656k${tiny.skipped}`, () => {
  it('reads ids, flags and limits from the real files', async () => {
    const dir = modelPath('tinystories-656k');
    const files = await loadModelFiles(dir);
    expect(files).toEqual({
      format: 'huggingface',
      path: path.resolve(dir),
      dir: path.resolve(dir),
      tokenizer: { kind: 'file', path: path.join(path.resolve(dir), 'tokenizer.json') },
      ...TINYSTORIES_FILES,
      byteFallback: true,
      // max_position_embeddings 512; tokenizer_config's model_max_length is the 1e30 "unset" value.
      displayName: null,
      // config.json torch_dtype.
      quantization: 'float32',
      tensorTypes: null,
    });
  });
});

describe.skipIf(!tiny.path)(`loadModelFiles on edited copies${tiny.skipped}`, () => {
  it('takes eos ids from generation_config first, as a list, then adds the tokenizer eos', async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'generation_config.json', { eos_token_id: [5, 7] });
    expect((await loadModelFiles(dir)).eosTokenIds).toEqual([5, 7, 2]);
  });

  it("adds config.json's eos ids after generation_config's, as the engine stops on both", async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'generation_config.json', { eos_token_id: [5, 7] });
    await mergeJson(dir, 'config.json', { eos_token_id: 9 });
    await mergeJson(dir, 'tokenizer_config.json', { eos_token: null });
    expect((await loadModelFiles(dir)).eosTokenIds).toEqual([5, 7, 9]);
  });

  it('falls back to config.json eos when generation_config.json is absent', async () => {
    const dir = await copyTinystories(dirs);
    await rm(path.join(dir, 'generation_config.json'));
    await mergeJson(dir, 'config.json', { eos_token_id: 9 });
    await mergeJson(dir, 'tokenizer_config.json', { eos_token: null });
    const files = await loadModelFiles(dir);
    expect(files.eosTokenIds).toEqual([9]);
    expect(files.eosToken).toBe(null);
  });

  it('accepts special tokens written as AddedToken objects', async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'tokenizer_config.json', {
      bos_token: { content: '<|end_story|>', lstrip: false, normalized: true },
    });
    const files = await loadModelFiles(dir);
    expect(files.bosToken).toBe('<|end_story|>');
    expect(files.bosTokenId).toBe(2);
  });

  it('uses add_bos_token / add_eos_token when tokenizer_config.json sets them', async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'tokenizer_config.json', { add_bos_token: false, add_eos_token: true });
    const files = await loadModelFiles(dir);
    expect([files.addBosToken, files.addEosToken]).toEqual([false, true]);
  });

  it("reads add-BOS from tokenizer.json's post-processor when tokenizer_config.json is silent", async () => {
    const dir = await copyTinystories(dirs);
    await editJson(dir, 'tokenizer_config.json', ({ add_bos_token: _a, add_eos_token: _e, ...rest }) => rest);
    expect((await loadModelFiles(dir)).addBosToken).toBe(true);
    await mergeJson(dir, 'tokenizer.json', { post_processor: null });
    expect((await loadModelFiles(dir)).addBosToken).toBe(false);
  });

  it('finds BOS inside a Sequence post-processor (Llama 3 layout)', async () => {
    const dir = await copyTinystories(dirs);
    await editJson(dir, 'tokenizer_config.json', ({ add_bos_token: _a, ...rest }) => rest);
    await editJson(dir, 'tokenizer.json', (j) => ({
      ...j,
      post_processor: { type: 'Sequence', processors: [{ type: 'ByteLevel' }, j.post_processor] },
    }));
    expect((await loadModelFiles(dir)).addBosToken).toBe(true);
  });

  it('takes the chat template from tokenizer_config.json, the named list form, or chat_template.jinja', async () => {
    const dir = await copyTinystories(dirs);
    await writeFile(path.join(dir, 'chat_template.jinja'), '{{ "from file" }}');
    const fromFile = await loadModelFiles(dir);
    expect(fromFile.chatTemplate).toBe('{{ "from file" }}');
    expect(fromFile.chatTemplateOrigin).toBe(path.join(dir, 'chat_template.jinja'));
    await mergeJson(dir, 'tokenizer_config.json', {
      chat_template: [
        { name: 'tool_use', template: 'tools' },
        { name: 'default', template: 'plain' },
      ],
    });
    expect((await loadModelFiles(dir)).chatTemplate).toBe('plain');
    await mergeJson(dir, 'tokenizer_config.json', { chat_template: 'inline' });
    const inline = await loadModelFiles(dir);
    expect(inline.chatTemplate).toBe('inline');
    expect(inline.chatTemplateOrigin).toBe(`${path.join(dir, 'tokenizer_config.json')} chat_template`);
  });

  it('limits the context by a plausible tokenizer model_max_length', async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'tokenizer_config.json', { model_max_length: 256 });
    expect((await loadModelFiles(dir)).maxModelLen).toBe(256);
  });
});

describe('loadModelFiles errors', () => {
  it.skipIf(!tiny.path)(`names a missing required file${tiny.skipped}`, async () => {
    for (const name of ['config.json', 'tokenizer.json', 'tokenizer_config.json']) {
      const dir = await copyTinystories(dirs);
      await rm(path.join(dir, name));
      const err = await modelError(loadModelFiles(dir));
      expect(err.code).toBe('STRATA_MODEL_FILES');
      expect(err.file).toBe(path.join(dir, name));
      expect(err.message).toBe(`${path.join(dir, name)} is missing; a model directory needs it`);
    }
  });

  it.skipIf(!tiny.path)(`names a file that is not JSON${tiny.skipped}`, async () => {
    const dir = await copyTinystories(dirs);
    await writeFile(path.join(dir, 'generation_config.json'), '{"eos_token_id": 2,');
    const err = await modelError(loadModelFiles(dir));
    expect(err.code).toBe('STRATA_MODEL_FILES');
    expect(err.file).toBe(path.join(dir, 'generation_config.json'));
    expect(err.message).toMatch(/generation_config\.json is not valid JSON: /);
  });

  it.skipIf(!tiny.path)(`names the file and field of a value of the wrong type${tiny.skipped}`, async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'config.json', { vocab_size: 'big' });
    const err = await modelError(loadModelFiles(dir));
    expect([err.code, err.file, err.field]).toEqual([
      'STRATA_MODEL_FILES',
      path.join(dir, 'config.json'),
      'vocab_size',
    ]);
    expect(err.message).toMatch(/config\.json: field "vocab_size" /);
  });

  it.skipIf(!tiny.path)(`names a nested field (an eos id in a list)${tiny.skipped}`, async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'generation_config.json', { eos_token_id: [2, -1] });
    const err = await modelError(loadModelFiles(dir));
    expect(err.field).toBe('eos_token_id.1');
    expect(err.file).toBe(path.join(dir, 'generation_config.json'));
  });

  it.skipIf(!tiny.path)(
    `rejects a special token that tokenizer.json does not contain${tiny.skipped}`,
    async () => {
      const dir = await copyTinystories(dirs);
      await mergeJson(dir, 'tokenizer_config.json', { bos_token: '<s>' });
      const err = await modelError(loadModelFiles(dir));
      expect(err.field).toBe('bos_token');
      expect(err.message).toBe(
        `${path.join(dir, 'tokenizer_config.json')}: field "bos_token" names "<s>", which tokenizer.json does not contain`,
      );
    },
  );

  it.skipIf(!tiny.path)(`rejects add_bos_token without any BOS token${tiny.skipped}`, async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'tokenizer_config.json', { bos_token: null });
    await mergeJson(dir, 'config.json', { bos_token_id: null });
    await mergeJson(dir, 'generation_config.json', { bos_token_id: null });
    const err = await modelError(loadModelFiles(dir));
    expect(err.field).toBe('add_bos_token');
    expect(err.message).toMatch(/"add_bos_token" is true but no BOS token is defined$/);
  });

  it('rejects a directory that does not exist', async () => {
    const dir = path.join(await dirs.make(), 'nope');
    const err = await modelError(loadModelFiles(dir));
    expect(err.file).toBe(path.join(dir, 'config.json'));
  });
});
