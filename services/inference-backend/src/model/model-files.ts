// Reads what the TS side needs from a model, once, at load: special-token ids, whether BOS/EOS are
// added, the tokenizer, the chat template and the context length. Two formats: a Hugging Face
// directory (config.json, tokenizer.json, tokenizer_config.json) or a GGUF file (./gguf-model.ts).
// Everything is checked here (zod), so the tokenizer, detokenizer and chat template can trust it.

import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { ModelError } from './errors.js';
import { ggufModelFiles } from './gguf-model.js';

/** Where the tokenizer.json comes from: a file, or text built in memory (from a GGUF file's metadata). */
export type TokenizerSource =
  | { readonly kind: 'file'; readonly path: string }
  | {
      readonly kind: 'json';
      readonly json: string;
      /** The file the JSON was built from (in error messages). */
      readonly origin: string;
    };

export interface ModelFiles {
  /** 'huggingface': a model directory; 'gguf': a GGUF file. */
  readonly format: 'huggingface' | 'gguf';
  /** Absolute path of what was loaded: the model directory, or the .gguf file. */
  readonly path: string;
  /** Absolute path of the model directory (for a GGUF file, the directory holding it). */
  readonly dir: string;
  /** tokenizer.json of the directory, or the one built from the GGUF metadata. */
  readonly tokenizer: TokenizerSource;
  readonly architectures: readonly string[];
  readonly modelType: string | null;
  /** Rows of the embedding matrix (config.json vocab_size, GGUF <arch>.vocab_size); may exceed the tokenizer's vocabulary. */
  readonly vocabSize: number;
  readonly bosToken: string | null;
  readonly bosTokenId: number | null;
  readonly eosToken: string | null;
  /**
   * Every id that ends generation. Hugging Face: generation_config's eos_token_id, then config's
   * (as the engine's own list), then the tokenizer's eos_token. GGUF: tokenizer.ggml.eos_token_id,
   * then eot_token_id and eom_token_id.
   */
  readonly eosTokenIds: readonly number[];
  /** Whether encoding a prompt with special tokens starts it with BOS / ends it with EOS. */
  readonly addBosToken: boolean;
  readonly addEosToken: boolean;
  /** Ids of the added tokens marked special (BOS, EOS, UNK, control tokens), ascending. */
  readonly specialTokenIds: readonly number[];
  /**
   * Whether tokenizer.json's decoder has a ByteFallback step: then a run of <0xNN> tokens decodes as
   * one UTF-8 byte string, all of it U+FFFD if any part is invalid, so text can change until the run ends.
   */
  readonly byteFallback: boolean;
  /** The Jinja source of the default chat template, or null when the model has none. */
  readonly chatTemplate: string | null;
  /** Where chatTemplate comes from (a file, a GGUF key, or STRATA_CHAT_TEMPLATE), or null when there is none. */
  readonly chatTemplateOrigin: string | null;
  /** Longest sequence (prompt + output, tokens) the model supports, or null when no file says. */
  readonly maxModelLen: number | null;
  /** The model's own name (GGUF general.name), or null when the files give none. */
  readonly displayName: string | null;
  /**
   * How the weights are stored: GGUF general.file_type as llama.cpp names it ('Q4_1', 'Q8_0', 'F16'),
   * else the most common type of the 2-D tensors; Hugging Face: config.json's (torch_)dtype, or
   * for a 4-bit AWQ/GPTQ checkpoint its quantization_config ('awq int4, groups of 128').
   */
  readonly quantization: string | null;
  /** GGUF: tensor count per ggml type ({ Q4_1: 210, F32: 61, Q8_0: 1 }); null for Hugging Face. */
  readonly tensorTypes: Readonly<Record<string, number>> | null;
}

const tokenId = z.number().int().nonnegative();
const tokenIdOrList = z.union([tokenId, z.array(tokenId)]);

const quantizationSchema = z.looseObject({
  quant_method: z.string().optional(),
  group_size: z.number().int().optional(),
  q_group_size: z.number().int().optional(), // AutoAWQ's quant_config.json
});

const configSchema = z.looseObject({
  architectures: z.array(z.string()).optional(),
  model_type: z.string().optional(),
  vocab_size: z.number().int().positive(),
  max_position_embeddings: z.number().int().positive().optional(),
  torch_dtype: z.string().nullish(),
  dtype: z.string().nullish(),
  bos_token_id: tokenId.nullish(),
  eos_token_id: tokenIdOrList.nullish(),
  // Checked in full by the engine (model_config.cpp), which refuses what it cannot run.
  quantization_config: quantizationSchema.nullish(),
});

/**
 * 'awq int4, groups of 128' for a 4-bit checkpoint, as the engine names it (from config.json's
 * quantization_config, or an older checkpoint's AutoGPTQ quantize_config.json or AutoAWQ
 * quant_config.json); else the dtype.
 */
async function hfQuantization(dir: string, config: z.infer<typeof configSchema>): Promise<string | null> {
  const named = (q: z.infer<typeof quantizationSchema>, method: string) => {
    const group = q.group_size ?? q.q_group_size;
    return `${q.quant_method ?? method} int4, ${group === -1 ? 'a group per row' : `groups of ${group}`}`;
  };
  if (config.quantization_config) return named(config.quantization_config, '?');
  for (const [file, method] of [
    ['quantize_config.json', 'gptq'],
    ['quant_config.json', 'awq'],
  ] as const) {
    const q = await readJson(dir, file, quantizationSchema, false);
    if (q) return named(q, method);
  }
  return config.torch_dtype ?? config.dtype ?? null;
}

const generationConfigSchema = z.looseObject({
  bos_token_id: tokenId.nullish(),
  eos_token_id: tokenIdOrList.nullish(),
});

// transformers writes special tokens either as plain strings or as serialized AddedToken objects.
const tokenString = z.union([z.string(), z.looseObject({ content: z.string() })]).nullish();

const tokenizerConfigSchema = z.looseObject({
  bos_token: tokenString,
  eos_token: tokenString,
  add_bos_token: z.boolean().nullish(),
  add_eos_token: z.boolean().nullish(),
  model_max_length: z.number().positive().nullish(),
  chat_template: z
    .union([z.string(), z.array(z.object({ name: z.string(), template: z.string() }))])
    .nullish(),
});

const tokenizerJsonSchema = z.looseObject({
  added_tokens: z.array(z.looseObject({ id: tokenId, content: z.string(), special: z.boolean() })).nullish(),
  post_processor: z.unknown(),
  decoder: z.unknown(),
  model: z.looseObject({
    type: z.string().optional(),
    // BPE/WordPiece/WordLevel: piece -> id; Unigram: [piece, score] at index id.
    vocab: z.union([z.record(z.string(), tokenId), z.array(z.tuple([z.string(), z.number()]))]).optional(),
  }),
});

const templateProcessingSchema = z.looseObject({
  type: z.literal('TemplateProcessing'),
  single: z.array(
    z.union([
      z.object({ SpecialToken: z.looseObject({ id: z.string() }) }),
      z.object({ Sequence: z.looseObject({ id: z.string() }) }),
    ]),
  ),
  special_tokens: z.record(z.string(), z.looseObject({ ids: z.array(tokenId) })),
});
const sequenceProcessorSchema = z.looseObject({
  type: z.literal('Sequence'),
  processors: z.array(z.unknown()),
});

type TokenizerJson = z.output<typeof tokenizerJsonSchema>;

/**
 * Reads and checks a model: a Hugging Face directory, a .gguf file, or a directory holding exactly
 * one .gguf file and no config.json. Throws ModelError 'STRATA_MODEL_FILES' naming the file and field.
 */
export async function loadModelFiles(modelPath: string): Promise<ModelFiles> {
  const target = path.resolve(modelPath);
  const gguf = await ggufFileOf(target);
  return gguf === null ? huggingFaceModelFiles(target) : ggufModelFiles(gguf);
}

/**
 * The GGUF file `target` stands for: itself when it is a file named *.gguf, else the one .gguf
 * file of a directory without config.json; null for anything else (read as a Hugging Face directory).
 */
export async function ggufFileOf(target: string): Promise<string | null> {
  const info = await stat(target).catch(() => null);
  if (info === null) return isGgufName(target) ? target : null;
  if (info.isFile()) {
    if (isGgufName(target)) return target;
    throw new ModelError(
      'STRATA_MODEL_FILES',
      `${target} is a file but not a .gguf file; give a .gguf file or a model directory`,
      { file: target },
    );
  }
  if (!info.isDirectory()) return null;
  const entries = await readdir(target, { withFileTypes: true });
  if (entries.some((e) => e.name === 'config.json')) return null;
  const ggufs = entries
    .filter((e) => (e.isFile() || e.isSymbolicLink()) && isGgufName(e.name))
    .map((e) => e.name);
  if (ggufs.length > 1) {
    throw new ModelError(
      'STRATA_MODEL_FILES',
      `${target} holds ${ggufs.length} .gguf files (${ggufs.sort().join(', ')}) and no config.json; ` +
        'name the one to serve',
      { file: target },
    );
  }
  return ggufs.length === 1 ? path.join(target, ggufs[0] as string) : null;
}

function isGgufName(name: string): boolean {
  return name.toLowerCase().endsWith('.gguf');
}

async function huggingFaceModelFiles(root: string): Promise<ModelFiles> {
  const config = await readJson(root, 'config.json', configSchema, true);
  const generation = await readJson(root, 'generation_config.json', generationConfigSchema, false);
  const tokCfg = await readJson(root, 'tokenizer_config.json', tokenizerConfigSchema, true);
  const tokJson = await readJson(root, 'tokenizer.json', tokenizerJsonSchema, true);
  const lookup = tokenLookup(tokJson);

  const bosToken = contentOf(tokCfg.bos_token);
  const eosToken = contentOf(tokCfg.eos_token);
  const bosFromTokenizer = bosToken === null ? null : lookupOrThrow(lookup, bosToken, root, 'bos_token');
  const eosFromTokenizer = eosToken === null ? null : lookupOrThrow(lookup, eosToken, root, 'eos_token');
  const bosTokenId = bosFromTokenizer ?? generation?.bos_token_id ?? config.bos_token_id ?? null;

  // generation_config's first (its first id is the one an appended EOS takes), then config.json's,
  // which the engine stops on too, then the tokenizer's.
  const eosIds = asList(generation?.eos_token_id ?? config.eos_token_id);
  for (const id of [
    ...asList(config.eos_token_id),
    ...(eosFromTokenizer === null ? [] : [eosFromTokenizer]),
  ]) {
    if (!eosIds.includes(id)) eosIds.push(id);
  }

  const ends = templateEnds(tokJson.post_processor);
  const addBosToken = tokCfg.add_bos_token ?? (bosTokenId !== null && ends.first === bosTokenId);
  const addEosToken = tokCfg.add_eos_token ?? (eosIds.length > 0 && ends.last === eosIds[0]);
  if (addBosToken && bosTokenId === null) {
    throw filesError(root, 'tokenizer_config.json', 'add_bos_token', 'is true but no BOS token is defined');
  }
  if (addEosToken && eosIds.length === 0) {
    throw filesError(root, 'tokenizer_config.json', 'add_eos_token', 'is true but no EOS token is defined');
  }

  const template = await chatTemplate(root, tokCfg.chat_template);
  return {
    format: 'huggingface',
    path: root,
    dir: root,
    tokenizer: { kind: 'file', path: path.join(root, 'tokenizer.json') },
    architectures: config.architectures ?? [],
    modelType: config.model_type ?? null,
    vocabSize: config.vocab_size,
    bosToken,
    bosTokenId,
    eosToken,
    eosTokenIds: eosIds,
    addBosToken,
    addEosToken,
    specialTokenIds: (tokJson.added_tokens ?? [])
      .filter((t) => t.special)
      .map((t) => t.id)
      .sort((a, b) => a - b),
    byteFallback: hasDecoder(tokJson.decoder, 'ByteFallback'),
    chatTemplate: template?.source ?? null,
    chatTemplateOrigin: template?.origin ?? null,
    maxModelLen: maxModelLen(config.max_position_embeddings, tokCfg.model_max_length),
    displayName: null,
    quantization: await hfQuantization(root, config),
    tensorTypes: null,
  };
}

async function readJson<S extends z.ZodType>(
  dir: string,
  name: string,
  schema: S,
  required: true,
): Promise<z.output<S>>;
async function readJson<S extends z.ZodType>(
  dir: string,
  name: string,
  schema: S,
  required: false,
): Promise<z.output<S> | null>;
async function readJson<S extends z.ZodType>(
  dir: string,
  name: string,
  schema: S,
  required: boolean,
): Promise<z.output<S> | null> {
  const file = path.join(dir, name);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if (!required && isErrno(err, 'ENOENT')) return null;
    const why = isErrno(err, 'ENOENT') ? 'is missing' : `cannot be read (${String(err)})`;
    throw new ModelError('STRATA_MODEL_FILES', `${file} ${why}; a model directory needs it`, {
      file,
      cause: err,
    });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ModelError('STRATA_MODEL_FILES', `${file} is not valid JSON: ${(err as Error).message}`, {
      file,
      cause: err,
    });
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = issue?.path.map(String).join('.') || '(root)';
    throw filesError(dir, name, field, issue?.message ?? 'is malformed');
  }
  return parsed.data;
}

function filesError(dir: string, name: string, field: string, problem: string): ModelError {
  const file = path.join(dir, name);
  return new ModelError('STRATA_MODEL_FILES', `${file}: field "${field}" ${problem}`, { file, field });
}

function isErrno(err: unknown, code: string): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === code;
}

function contentOf(token: z.output<typeof tokenString>): string | null {
  if (token === null || token === undefined) return null;
  return typeof token === 'string' ? token : token.content;
}

function asList(ids: number | number[] | null | undefined): number[] {
  if (ids === null || ids === undefined) return [];
  return Array.isArray(ids) ? [...ids] : [ids];
}

/** Token string -> id, added tokens first, as the tokenizer itself resolves them. */
function tokenLookup(tok: TokenizerJson): Map<string, number> {
  const map = new Map<string, number>();
  const vocab = tok.model.vocab;
  if (Array.isArray(vocab)) {
    for (const [id, [piece]] of vocab.entries()) map.set(piece, id);
  } else if (vocab !== undefined) {
    for (const [piece, id] of Object.entries(vocab)) map.set(piece, id);
  }
  for (const added of tok.added_tokens ?? []) map.set(added.content, added.id);
  return map;
}

function lookupOrThrow(lookup: Map<string, number>, token: string, dir: string, field: string): number {
  const id = lookup.get(token);
  if (id === undefined) {
    throw filesError(
      dir,
      'tokenizer_config.json',
      field,
      `names "${token}", which tokenizer.json does not contain`,
    );
  }
  return id;
}

/** First and last special-token ids a TemplateProcessing post-processor puts around a single sequence. */
function templateEnds(processor: unknown): { first: number | null; last: number | null } {
  const seq = sequenceProcessorSchema.safeParse(processor);
  if (seq.success) {
    for (const inner of seq.data.processors) {
      const ends = templateEnds(inner);
      if (ends.first !== null || ends.last !== null) return ends;
    }
    return { first: null, last: null };
  }
  const tpl = templateProcessingSchema.safeParse(processor);
  if (!tpl.success) return { first: null, last: null };
  const idOf = (piece: (typeof tpl.data.single)[number] | undefined): number | null =>
    piece !== undefined && 'SpecialToken' in piece
      ? (tpl.data.special_tokens[piece.SpecialToken.id]?.ids[0] ?? null)
      : null;
  return { first: idOf(tpl.data.single[0]), last: idOf(tpl.data.single.at(-1)) };
}

const decoderSchema = z.looseObject({ type: z.string(), decoders: z.array(z.unknown()).optional() });

function hasDecoder(decoder: unknown, type: string): boolean {
  const parsed = decoderSchema.safeParse(decoder);
  if (!parsed.success) return false;
  return parsed.data.type === type || (parsed.data.decoders ?? []).some((d) => hasDecoder(d, type));
}

/** tokenizer_config.json chat_template (a string or named list), else chat_template.jinja beside it. */
async function chatTemplate(
  dir: string,
  field: string | { name: string; template: string }[] | null | undefined,
): Promise<{ source: string; origin: string } | null> {
  const origin = `${path.join(dir, 'tokenizer_config.json')} chat_template`;
  if (typeof field === 'string') return { source: field, origin };
  if (Array.isArray(field)) {
    const named = field.find((t) => t.name === 'default');
    return named === undefined ? null : { source: named.template, origin: `${origin} "default"` };
  }
  const file = path.join(dir, 'chat_template.jinja');
  try {
    return { source: await readFile(file, 'utf8'), origin: file };
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null;
    throw new ModelError('STRATA_MODEL_FILES', `${path.join(dir, 'chat_template.jinja')} cannot be read`, {
      file: path.join(dir, 'chat_template.jinja'),
      cause: err,
    });
  }
}

// tokenizer_config's model_max_length is often a 1e30 "unset" sentinel; only a plausible value counts.
const PLAUSIBLE_MAX_LEN = 2 ** 31;

function maxModelLen(positions: number | undefined, tokenizerMax: number | null | undefined): number | null {
  const limits = [positions, tokenizerMax].filter(
    (n): n is number => n !== undefined && n !== null && Number.isInteger(n) && n < PLAUSIBLE_MAX_LEN,
  );
  return limits.length === 0 ? null : Math.min(...limits);
}
