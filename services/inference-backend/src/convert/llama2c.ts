// llama2.c legacy checkpoint (+ its SentencePiece tokenizer) -> a Hugging Face Llama directory:
// config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json.
//
// Checkpoint layout (karpathy/llama2.c run.c, "legacy" version 0), little-endian:
//   int32 x 7: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (< 0: unshared classifier), seq_len
//   float32, in this order (Linear weights are (out, in) row-major, as PyTorch's):
//     token_embedding (vocab, dim) | rms_att (layer, dim) | wq (layer, n_heads*hs, dim)
//     wk, wv (layer, n_kv_heads*hs, dim) | wo (layer, dim, n_heads*hs) | rms_ffn (layer, dim)
//     w1 (layer, hidden, dim) | w2 (layer, dim, hidden) | w3 (layer, hidden, dim) | rms_final (dim)
//     freq_cis_real, freq_cis_imag (seq_len, hs/2 each; unused, RoPE is recomputed) | [wcls (vocab, dim)]
//
// RoPE pairs differ: llama2.c rotates (x[2i], x[2i+1]) by angle pos * 10000^(-2i/hs), Hugging Face
// rotates (x[i], x[i + hs/2]) by the same angle. Reordering each head's rows of wq and wk so that
// HF row i is llama2.c row 2i and HF row hs/2 + i is llama2.c row 2i + 1 makes HF rotate exactly the
// pairs llama2.c rotates; q.k is unchanged because q and k get the same order. (This is the permute()
// of transformers' convert_llama_weights_to_hf.py, Meta's checkpoints being interleaved too.)

import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ModelError } from '../model/errors.js';
import { buildHfTokenizer } from './hf-tokenizer.js';
import { type F32Tensor, writeSafetensors } from './safetensors.js';
import { parseSentencePieceModel } from './sentencepiece-model.js';

export interface Llama2cConfig {
  dim: number;
  hiddenDim: number;
  nLayers: number;
  nHeads: number;
  nKvHeads: number;
  vocabSize: number;
  seqLen: number;
  /** The classifier is the token embedding (vocab_size > 0 in the header). */
  sharedClassifier: boolean;
}

export interface ConvertLlama2cOptions {
  /** llama2.c legacy checkpoint (.bin). */
  checkpoint: string;
  /** The SentencePiece model the checkpoint was trained with (.model). */
  tokenizerModel: string;
  /** Output directory; created if missing, files in it overwritten. */
  outDir: string;
  /** One line per step, for a CLI to print. */
  onProgress?: (line: string) => void;
}

export interface ConvertResult {
  config: Llama2cConfig;
  /** What was written: absolute path and size in bytes. */
  files: { path: string; bytes: number }[];
}

const HEADER_INTS = 7;
const HEADER_BYTES = HEADER_INTS * 4;

export async function convertLlama2c(options: ConvertLlama2cOptions): Promise<ConvertResult> {
  const progress = options.onProgress ?? (() => {});
  const bytes = await readFile(options.checkpoint);
  const config = parseLlama2cHeader(bytes, options.checkpoint);
  progress(
    `read ${options.checkpoint}: dim ${config.dim}, hidden ${config.hiddenDim}, ${config.nLayers} layers, ` +
      `${config.nHeads} heads, ${config.nKvHeads} kv heads, vocab ${config.vocabSize}, seq_len ${config.seqLen}, ` +
      `${config.sharedClassifier ? 'shared' : 'separate'} classifier`,
  );
  const tensors = llama2cTensors(bytes, config);

  const spm = parseSentencePieceModel(await readFile(options.tokenizerModel), options.tokenizerModel);
  if (spm.pieces.length !== config.vocabSize) {
    throw new ModelError(
      'STRATA_CONVERT',
      `${options.tokenizerModel} has ${spm.pieces.length} pieces but ${options.checkpoint} has vocab_size ${config.vocabSize}`,
      { file: options.tokenizerModel },
    );
  }
  const bosId = spm.trainer.bosId >= 0 ? spm.trainer.bosId : null;
  const eosId = spm.trainer.eosId >= 0 ? spm.trainer.eosId : null;
  progress(`read ${options.tokenizerModel}: ${spm.pieces.length} pieces, bos ${bosId}, eos ${eosId}`);
  const tokenizerFiles = buildHfTokenizer(spm, { modelMaxLength: config.seqLen });

  await mkdir(options.outDir, { recursive: true });
  const files: ConvertResult['files'] = [];
  const writeJson = async (name: string, value: unknown): Promise<void> => {
    const file = path.resolve(options.outDir, name);
    await writeFile(file, `${JSON.stringify(value, null, 2)}\n`);
    files.push({ path: file, bytes: (await stat(file)).size });
    progress(`wrote ${file} (${files.at(-1)?.bytes} bytes)`);
  };

  await writeJson('config.json', hfConfig(config, bosId, eosId));
  await writeJson('generation_config.json', { bos_token_id: bosId, eos_token_id: eosId });
  const weights = path.resolve(options.outDir, 'model.safetensors');
  files.push({ path: weights, bytes: await writeSafetensors(weights, tensors) });
  progress(`wrote ${weights} (${tensors.length} tensors, ${files.at(-1)?.bytes} bytes)`);
  await writeJson('tokenizer.json', tokenizerFiles.tokenizer);
  await writeJson('tokenizer_config.json', tokenizerFiles.tokenizerConfig);
  return { config, files };
}

/** Throws ModelError STRATA_CONVERT when the header is implausible or the file size does not match it. */
export function parseLlama2cHeader(bytes: Uint8Array, file: string): Llama2cConfig {
  const fail = (why: string, field?: string): ModelError =>
    new ModelError('STRATA_CONVERT', `${file} is not a llama2.c legacy checkpoint: ${why}`, {
      file,
      ...(field === undefined ? {} : { field }),
    });
  if (bytes.length < HEADER_BYTES) throw fail(`it has ${bytes.length} bytes, fewer than the 28-byte header`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const [dim, hiddenDim, nLayers, nHeads, nKvHeads, signedVocab, seqLen] = Array.from(
    { length: HEADER_INTS },
    (_, i) => view.getInt32(i * 4, true),
  ) as [number, number, number, number, number, number, number];
  const config: Llama2cConfig = {
    dim,
    hiddenDim,
    nLayers,
    nHeads,
    nKvHeads,
    vocabSize: Math.abs(signedVocab),
    seqLen,
    sharedClassifier: signedVocab > 0,
  };
  for (const [field, value] of Object.entries({ dim, hiddenDim, nLayers, nHeads, nKvHeads, seqLen })) {
    if (value <= 0) throw fail(`header field ${field} is ${value}`, field);
  }
  if (signedVocab === 0) throw fail('header field vocab_size is 0', 'vocabSize');
  if (dim % nHeads !== 0 || (dim / nHeads) % 2 !== 0) {
    throw fail(`dim ${dim} is not n_heads ${nHeads} x an even head size`, 'dim');
  }
  if (nHeads % nKvHeads !== 0)
    throw fail(`n_heads ${nHeads} is not a multiple of n_kv_heads ${nKvHeads}`, 'nKvHeads');
  const expected = HEADER_BYTES + 4 * floatCount(config);
  if (bytes.length !== expected) {
    throw fail(`the header implies ${expected} bytes but the file has ${bytes.length}`);
  }
  return config;
}

function floatCount(c: Llama2cConfig): number {
  const hs = c.dim / c.nHeads;
  const kvDim = c.nKvHeads * hs;
  const perLayer = 2 * c.dim + 2 * c.dim * c.dim + 2 * kvDim * c.dim + 3 * c.hiddenDim * c.dim;
  const classifier = c.sharedClassifier ? 0 : c.vocabSize * c.dim;
  return c.vocabSize * c.dim + c.nLayers * perLayer + c.dim + c.seqLen * hs + classifier;
}

/** The checkpoint's weights under Hugging Face Llama names, q/k rows in rotate-half order. */
function llama2cTensors(bytes: Uint8Array, c: Llama2cConfig): F32Tensor[] {
  const hs = c.dim / c.nHeads;
  const kvDim = c.nKvHeads * hs;
  let offset = HEADER_BYTES;
  // One (n, ...shape) block per layer-stacked weight; copied out so the result owns aligned memory.
  const take = (count: number): Float32Array => {
    const out = new Float32Array(
      bytes.buffer.slice(bytes.byteOffset + offset, bytes.byteOffset + offset + 4 * count),
    );
    offset += 4 * count;
    return out;
  };
  const perLayer = (block: Float32Array, layer: number, size: number): Float32Array =>
    block.subarray(layer * size, (layer + 1) * size);

  const embedding = take(c.vocabSize * c.dim);
  const rmsAtt = take(c.nLayers * c.dim);
  const wq = take(c.nLayers * c.dim * c.dim);
  const wk = take(c.nLayers * kvDim * c.dim);
  const wv = take(c.nLayers * kvDim * c.dim);
  const wo = take(c.nLayers * c.dim * c.dim);
  const rmsFfn = take(c.nLayers * c.dim);
  const w1 = take(c.nLayers * c.hiddenDim * c.dim);
  const w2 = take(c.nLayers * c.dim * c.hiddenDim);
  const w3 = take(c.nLayers * c.hiddenDim * c.dim);
  const rmsFinal = take(c.dim);
  take(c.seqLen * hs); // freq_cis_real + freq_cis_imag
  const wcls = c.sharedClassifier ? null : take(c.vocabSize * c.dim);

  const tensors: F32Tensor[] = [
    { name: 'model.embed_tokens.weight', shape: [c.vocabSize, c.dim], data: embedding },
  ];
  for (let l = 0; l < c.nLayers; l += 1) {
    const p = `model.layers.${l}`;
    tensors.push(
      { name: `${p}.input_layernorm.weight`, shape: [c.dim], data: perLayer(rmsAtt, l, c.dim) },
      {
        name: `${p}.self_attn.q_proj.weight`,
        shape: [c.dim, c.dim],
        data: interleavedToHalves(perLayer(wq, l, c.dim * c.dim), c.nHeads, hs, c.dim),
      },
      {
        name: `${p}.self_attn.k_proj.weight`,
        shape: [kvDim, c.dim],
        data: interleavedToHalves(perLayer(wk, l, kvDim * c.dim), c.nKvHeads, hs, c.dim),
      },
      { name: `${p}.self_attn.v_proj.weight`, shape: [kvDim, c.dim], data: perLayer(wv, l, kvDim * c.dim) },
      { name: `${p}.self_attn.o_proj.weight`, shape: [c.dim, c.dim], data: perLayer(wo, l, c.dim * c.dim) },
      { name: `${p}.post_attention_layernorm.weight`, shape: [c.dim], data: perLayer(rmsFfn, l, c.dim) },
      {
        name: `${p}.mlp.gate_proj.weight`,
        shape: [c.hiddenDim, c.dim],
        data: perLayer(w1, l, c.hiddenDim * c.dim),
      },
      {
        name: `${p}.mlp.up_proj.weight`,
        shape: [c.hiddenDim, c.dim],
        data: perLayer(w3, l, c.hiddenDim * c.dim),
      },
      {
        name: `${p}.mlp.down_proj.weight`,
        shape: [c.dim, c.hiddenDim],
        data: perLayer(w2, l, c.dim * c.hiddenDim),
      },
    );
  }
  tensors.push({ name: 'model.norm.weight', shape: [c.dim], data: rmsFinal });
  if (wcls !== null) tensors.push({ name: 'lm_head.weight', shape: [c.vocabSize, c.dim], data: wcls });
  return tensors;
}

/**
 * Row order of a (heads * hs, cols) projection, per head: llama2.c rows (0, 1, 2, 3, ..., hs-1) as
 * RoPE pairs (0,1), (2,3), ... become HF rows (0, 2, 4, ..., hs-2, 1, 3, ..., hs-1), pairs (i, i + hs/2).
 */
export function interleavedToHalves(w: Float32Array, heads: number, hs: number, cols: number): Float32Array {
  const out = new Float32Array(w.length);
  const half = hs / 2;
  for (let h = 0; h < heads; h += 1) {
    for (let r = 0; r < hs; r += 1) {
      const from = r < half ? 2 * r : 2 * (r - half) + 1;
      const src = (h * hs + from) * cols;
      out.set(w.subarray(src, src + cols), (h * hs + r) * cols);
    }
  }
  return out;
}

function hfConfig(c: Llama2cConfig, bosId: number | null, eosId: number | null): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    hidden_size: c.dim,
    intermediate_size: c.hiddenDim,
    num_hidden_layers: c.nLayers,
    num_attention_heads: c.nHeads,
    num_key_value_heads: c.nKvHeads,
    head_dim: c.dim / c.nHeads,
    vocab_size: c.vocabSize,
    max_position_embeddings: c.seqLen,
    hidden_act: 'silu',
    // llama2.c's rmsnorm adds 1e-5 and its RoPE uses base 10000, unscaled.
    rms_norm_eps: 1e-5,
    rope_theta: 10000.0,
    rope_scaling: null,
    attention_bias: false,
    attention_dropout: 0.0,
    mlp_bias: false,
    tie_word_embeddings: c.sharedClassifier,
    bos_token_id: bosId,
    eos_token_id: eosId,
    initializer_range: 0.02,
    pretraining_tp: 1,
    use_cache: true,
    torch_dtype: 'float32',
  };
}
