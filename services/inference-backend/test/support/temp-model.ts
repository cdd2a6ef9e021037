// Model directories built in a temp folder for one test file: copies of a real model's JSON files
// that a test then edits, and the Llama 2 tokenizer converted by our SentencePiece converter.
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildHfTokenizer } from '../../src/convert/hf-tokenizer.js';
import { parseSentencePieceModel } from '../../src/convert/sentencepiece-model.js';
import { modelPath, type OptionalModel, optionalModel, smollm2Gguf } from './models.js';

export class TempDirs {
  readonly #dirs: string[] = [];

  async make(prefix = 'strata-model-'): Promise<string> {
    const dir = await mkdtemp(path.join(tmpdir(), prefix));
    this.#dirs.push(dir);
    return dir;
  }

  async removeAll(): Promise<void> {
    await Promise.all(this.#dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
  }
}

/** What loadModelFiles reads from tinystories-656k, the same from its JSON files as from its GGUF. */
export const TINYSTORIES_FILES = {
  architectures: ['LlamaForCausalLM'],
  modelType: 'llama',
  vocabSize: 2048,
  bosToken: '<|start_story|>',
  bosTokenId: 1,
  eosToken: '<|end_story|>',
  eosTokenIds: [2],
  addBosToken: true,
  addEosToken: false,
  specialTokenIds: [0, 1, 2],
  chatTemplate: null,
  chatTemplateOrigin: null,
  maxModelLen: 512,
};

const TINYSTORIES_JSON = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'];

/** A copy of tinystories-656k's JSON files (no weights) in a fresh temp dir. */
export async function copyTinystories(dirs: TempDirs): Promise<string> {
  const dir = await dirs.make();
  for (const name of TINYSTORIES_JSON)
    await copyFile(path.join(modelPath('tinystories-656k'), name), path.join(dir, name));
  return dir;
}

export async function readJsonFile(file: string): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
}

/** Rewrites one JSON file of `dir` through `edit`. */
export async function editJson(
  dir: string,
  name: string,
  edit: (json: Record<string, unknown>) => Record<string, unknown>,
): Promise<void> {
  const file = path.join(dir, name);
  await writeFile(file, JSON.stringify(edit(await readJsonFile(file))));
}

/** Sets `fields` in one JSON file of `dir`, keeping the rest. */
export async function mergeJson(dir: string, name: string, fields: Record<string, unknown>): Promise<void> {
  await editJson(dir, name, (json) => ({ ...json, ...fields }));
}

/** Llama 2's tokenizer.model converted to tokenizer.json (+ a config.json naming its vocab size). */
export async function convertedLlama2Tokenizer(dirs: TempDirs): Promise<string> {
  const dir = await dirs.make('strata-llama2-tok-');
  const model = parseSentencePieceModel(
    await readFile(path.join(modelPath('llama2-tokenizer'), 'tokenizer.model')),
  );
  const files = buildHfTokenizer(model, { modelMaxLength: 4096 });
  await mkdir(dir, { recursive: true });
  await writeFile(path.join(dir, 'tokenizer.json'), JSON.stringify(files.tokenizer));
  await writeFile(path.join(dir, 'tokenizer_config.json'), JSON.stringify(files.tokenizerConfig));
  await writeFile(
    path.join(dir, 'config.json'),
    JSON.stringify({
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      vocab_size: 32000,
      bos_token_id: 1,
      eos_token_id: 2,
      max_position_embeddings: 4096,
    }),
  );
  return dir;
}

export interface TokenizerModel {
  name: string;
  /** Its path is unset when the model is missing: the tests on it skip, saying why. */
  model: OptionalModel;
  /** The model directory to load; the Llama 2 one is converted into a dir of `dirs` first. */
  dir: () => Promise<string>;
}

/** The tokenizers the tokenizer tests cover: tinystories-656k as JSON and GGUF, SmolLM2, Llama 2. */
export function tokenizerModels(dirs: TempDirs): TokenizerModel[] {
  const smollm2 = smollm2Gguf();
  return [
    {
      name: 'tinystories-656k',
      model: optionalModel('tinystories-656k'),
      dir: async () => modelPath('tinystories-656k'),
    },
    {
      name: 'tinystories-656k GGUF',
      model: optionalModel('tinystories-656k-gguf'),
      dir: async () => modelPath('tinystories-656k-gguf'),
    },
    { name: 'SmolLM2 GGUF', model: smollm2, dir: async () => smollm2.path as string },
    {
      name: 'Llama 2 (converted)',
      model: optionalModel('llama2-tokenizer'),
      dir: () => convertedLlama2Tokenizer(dirs),
    },
  ];
}
