// GET /v1/models names the model and how it is stored (format, quantization, the files' own name),
// and the served name of a GGUF file is its file name without .gguf. The route runs on a stub
// host holding real ModelFiles, so GGUF cards are checked without the engine loading the file.
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { loadConfig } from '@strata/common';
import Fastify, { type FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import { afterAll, describe, expect, it } from 'vitest';
import { configEnv, configSchema } from '../src/config.js';
import type { ModelHost } from '../src/inference/model-host.js';
import { servedModelName } from '../src/inference/runtime.js';
import { loadModelFiles, type ModelFiles } from '../src/model/model-files.js';
import { modelsRoutes } from '../src/routes/openai-models.js';
import { ggufBytes, int32s, strings } from './support/gguf-writer.js';
import { optionalModel, smollm2Gguf } from './support/models.js';
import { copyTinystories, editJson, mergeJson, TempDirs } from './support/temp-model.js';

const dirs = new TempDirs();
const apps: FastifyInstance[] = [];
afterAll(async () => {
  await Promise.all(apps.map((a) => a.close()));
  await dirs.removeAll();
});

/** GET /v1/models of the route serving `files` as `modelName`. */
async function modelCards(files: ModelFiles, modelName: string): Promise<unknown> {
  const app = Fastify();
  apps.push(app);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  const runtime = { modelName, maxModelLen: files.maxModelLen ?? 0, files };
  await app.register(modelsRoutes, { host: { get: () => runtime } as unknown as ModelHost });
  const res = await app.inject({ method: 'GET', url: '/v1/models' });
  expect(res.statusCode).toBe(200);
  return res.json();
}

const config = (env: Record<string, string>) => loadConfig({ schema: configSchema, envMap: configEnv, env });

describe('servedModelName', () => {
  it('is a GGUF file name without .gguf, a directory name, or the configured name', () => {
    expect(servedModelName(config({ STRATA_MODEL_DIR: '/m/SmolLM2-135M-Instruct.Q4_1.gguf' }))).toBe(
      'SmolLM2-135M-Instruct.Q4_1',
    );
    expect(servedModelName(config({ STRATA_MODEL_DIR: '/m/Tiny.GGUF' }))).toBe('Tiny');
    expect(servedModelName(config({ STRATA_MODEL_DIR: '/m/tinystories-656k-gguf/' }))).toBe(
      'tinystories-656k-gguf',
    );
    expect(servedModelName(config({ STRATA_MODEL_DIR: '/m/.gguf' }))).toBe('.gguf');
    expect(servedModelName(config({ STRATA_MODEL_DIR: '/m/x.gguf', STRATA_SERVED_MODEL_NAME: 'smol' }))).toBe(
      'smol',
    );
  });
});

describe('GET /v1/models', () => {
  it('gives format, quantization and display name of a GGUF model', async () => {
    const file = path.join(await dirs.make('strata-card-'), 'tiny-chat.Q4_0.gguf');
    await writeFile(
      file,
      ggufBytes([
        ['general.architecture', 'string', 'llama'],
        ['general.name', 'string', 'Tiny Chat'],
        ['general.file_type', 'uint32', 2],
        ['llama.context_length', 'uint32', 256],
        ['tokenizer.ggml.model', 'string', 'gpt2'],
        ['tokenizer.ggml.pre', 'string', 'gpt-2'],
        ['tokenizer.ggml.tokens', 'array', strings(['a', 'b', 'ab'])],
        ['tokenizer.ggml.token_type', 'array', int32s([1, 1, 1])],
        ['tokenizer.ggml.merges', 'array', strings(['a b'])],
      ]),
    );
    const name = servedModelName(config({ STRATA_MODEL_DIR: file }));
    expect(await modelCards(await loadModelFiles(file), name)).toEqual({
      object: 'list',
      data: [
        {
          id: 'tiny-chat.Q4_0',
          object: 'model',
          created: expect.any(Number),
          owned_by: 'strata',
          root: 'tiny-chat.Q4_0',
          max_model_len: 256,
          format: 'gguf',
          quantization: 'Q4_0',
          display_name: 'Tiny Chat',
        },
      ],
    });
  });

  const hf = optionalModel('tinystories-656k');
  it.skipIf(!hf.path)(`gives a Hugging Face model's dtype as its quantization${hf.skipped}`, async () => {
    const files = await loadModelFiles(hf.path as string);
    const cards = (await modelCards(files, 'tinystories-656k')) as { data: Record<string, unknown>[] };
    expect(cards.data[0]).toMatchObject({
      format: 'huggingface',
      quantization: 'float32',
      display_name: null,
    });
  });

  it.skipIf(!hf.path)(`names a 4-bit AWQ or GPTQ checkpoint's quantization${hf.skipped}`, async () => {
    const dir = await copyTinystories(dirs);
    for (const [quantization, name] of [
      [
        { quant_method: 'awq', bits: 4, group_size: 128, version: 'gemm', zero_point: true },
        'awq int4, groups of 128',
      ],
      [
        { quant_method: 'gptq', bits: 4, group_size: -1, desc_act: true, sym: true },
        'gptq int4, a group per row',
      ],
    ] as const) {
      await mergeJson(dir, 'config.json', { quantization_config: quantization });
      const cards = (await modelCards(await loadModelFiles(dir), 'tinystories-656k')) as {
        data: Record<string, unknown>[];
      };
      expect(cards.data[0]).toMatchObject({ format: 'huggingface', quantization: name });
    }
    // Older checkpoints keep it beside config.json: AutoGPTQ's quantize_config.json, AutoAWQ's quant_config.json.
    await editJson(dir, 'config.json', ({ quantization_config: _, ...rest }) => rest);
    for (const [file, json, name] of [
      [
        'quantize_config.json',
        { bits: 4, group_size: 128, desc_act: false, sym: true },
        'gptq int4, groups of 128',
      ],
      [
        'quant_config.json',
        { zero_point: true, q_group_size: 64, w_bit: 4, version: 'GEMM' },
        'awq int4, groups of 64',
      ],
    ] as const) {
      await writeFile(path.join(dir, file), JSON.stringify(json));
      const cards = (await modelCards(await loadModelFiles(dir), 'tinystories-656k')) as {
        data: Record<string, unknown>[];
      };
      expect(cards.data[0]).toMatchObject({ quantization: name });
      await rm(path.join(dir, file));
    }
  });

  const smol = smollm2Gguf();
  it.skipIf(!smol.path)(`names SmolLM2 and its Q4_1 quantization${smol.skipped}`, async () => {
    const file = smol.path as string;
    const cards = (await modelCards(
      await loadModelFiles(file),
      servedModelName(config({ STRATA_MODEL_DIR: file })),
    )) as { data: Record<string, unknown>[] };
    expect(cards.data[0]).toMatchObject({
      id: path.basename(file, '.gguf'),
      format: 'gguf',
      quantization: 'Q4_1',
      max_model_len: 8192,
    });
  });
});
