// ModelFiles from a GGUF file's metadata: the architecture, vocabulary size and context length,
// special tokens and end-of-generation ids, BOS/EOS flags, the tokenizer (as tokenizer.json text,
// ./gguf-tokenizer.ts), the chat template, and how the weights are quantized. Key names are
// llama.cpp's (gguf-py/gguf/constants.py).

import path from 'node:path';
import { fileTypeName, type GgufFile, readGguf } from './gguf.js';
import { ggufTokenizer, TokenType } from './gguf-tokenizer.js';
import type { ModelFiles } from './model-files.js';

/** general.architecture values served, with the Hugging Face architecture each one is. */
const ARCHITECTURES: ReadonlyMap<string, string> = new Map([['llama', 'LlamaForCausalLM']]);

/** Reads `file` (a .gguf file); throws ModelError STRATA_MODEL_FILES naming the file and key at fault. */
export async function ggufModelFiles(file: string): Promise<ModelFiles> {
  const gguf = await readGguf(file);
  const arch = gguf.string('general.architecture', true);
  const hfArchitecture = ARCHITECTURES.get(arch);
  if (hfArchitecture === undefined) {
    throw gguf.error(
      'general.architecture',
      `is "${arch}"; this backend serves only ${[...ARCHITECTURES.keys()].join(', ')} models`,
    );
  }
  const tok = ggufTokenizer(gguf);
  const { tokens, tokenTypes } = tok;

  const tokenId = (key: string): number | null => {
    const id = gguf.uint(key);
    if (id !== null && id >= tokens.length) {
      throw gguf.error(key, `is ${id}, outside the vocabulary (${tokens.length} tokens)`);
    }
    return id;
  };
  const bosTokenId = tokenId('tokenizer.ggml.bos_token_id');
  const eosTokenId = tokenId('tokenizer.ggml.eos_token_id');
  const eosTokenIds: number[] = [];
  for (const id of [
    eosTokenId,
    tokenId('tokenizer.ggml.eot_token_id'),
    tokenId('tokenizer.ggml.eom_token_id'),
  ]) {
    if (id !== null && !eosTokenIds.includes(id)) eosTokenIds.push(id);
  }

  const addBosToken = gguf.bool('tokenizer.ggml.add_bos_token') ?? tok.defaultAddBos;
  const addEosToken = gguf.bool('tokenizer.ggml.add_eos_token') ?? false;
  if (addBosToken && bosTokenId === null) {
    throw gguf.error('tokenizer.ggml.bos_token_id', 'is missing but BOS is added to every prompt');
  }
  if (addEosToken && eosTokenId === null) {
    throw gguf.error('tokenizer.ggml.eos_token_id', 'is missing but EOS is added to every prompt');
  }

  const vocabSize = vocabularyRows(gguf, arch, tokens.length);
  const specialTokenIds: number[] = [];
  tokenTypes.forEach((type, id) => {
    if (type === TokenType.CONTROL || type === TokenType.UNKNOWN) specialTokenIds.push(id);
  });
  const chatTemplate = gguf.string('tokenizer.chat_template');
  const resolved = path.resolve(file);
  return {
    format: 'gguf',
    path: resolved,
    dir: path.dirname(resolved),
    tokenizer: { kind: 'json', json: tok.json, origin: resolved },
    architectures: [hfArchitecture],
    modelType: arch,
    vocabSize,
    bosToken: bosTokenId === null ? null : (tokens[bosTokenId] ?? null),
    bosTokenId,
    eosToken: eosTokenId === null ? null : (tokens[eosTokenId] ?? null),
    eosTokenIds,
    addBosToken,
    addEosToken,
    specialTokenIds,
    byteFallback: tok.byteFallback,
    chatTemplate,
    chatTemplateOrigin: chatTemplate === null ? null : `${resolved} tokenizer.chat_template`,
    maxModelLen: gguf.uint(`${arch}.context_length`),
    displayName: gguf.string('general.name'),
    quantization: quantization(gguf),
    tensorTypes: gguf.tensorTypeCounts(),
  };
}

/**
 * Rows of the embedding matrix: <arch>.vocab_size, else token_embd.weight's second dimension,
 * else the token count. Every token must have a row.
 */
function vocabularyRows(gguf: GgufFile, arch: string, tokenCount: number): number {
  const key = `${arch}.vocab_size`;
  const embedding = gguf.tensors.find((t) => t.name === 'token_embd.weight');
  const rows = gguf.uint(key) ?? embedding?.dims[1] ?? tokenCount;
  if (rows < tokenCount) {
    throw gguf.error(key, `is ${rows}, fewer than the ${tokenCount} tokens of tokenizer.ggml.tokens`);
  }
  return rows;
}

/** general.file_type's name, else the type holding the most elements among the 2-D (and larger) tensors. */
function quantization(gguf: GgufFile): string | null {
  const fileType = gguf.uint('general.file_type');
  const named = fileType === null ? null : fileTypeName(fileType);
  if (named !== null) return named;
  const elements = new Map<string, number>();
  for (const t of gguf.tensors) {
    if (t.dims.length < 2) continue;
    const n = t.dims.reduce((a, b) => a * b, 1);
    elements.set(t.typeName, (elements.get(t.typeName) ?? 0) + n);
  }
  let best: string | null = null;
  for (const [name, n] of elements) if (best === null || n > (elements.get(best) ?? 0)) best = name;
  return best;
}
