import { copyFile, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../src/convert/cli.js';
import { type ConvertResult, convertLlama2c } from '../src/convert/llama2c.js';
import { readSafetensorsHeader, type SafetensorsHeader } from '../src/convert/safetensors.js';
import { ModelError } from '../src/model/errors.js';
import { loadModelFiles } from '../src/model/model-files.js';
import { Tokenizer } from '../src/model/tokenizer.js';
import { modelPath, optionalModel } from './support/models.js';
import { readJsonFile, TempDirs } from './support/temp-model.js';

const stories = optionalModel('stories260K');
const llama2Tokenizer = optionalModel('llama2-tokenizer');

interface Golden {
  prompts: { text: string; prompt_ids: number[] }[];
  tokenizer: { bos_id: number; eos_id: number; cases: { text: string; ids: number[] }[] };
}

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

const DIM = 64;
const HIDDEN = 172;
const LAYERS = 5;
const HEADS = 8;
const KV_HEADS = 4;
const HEAD_SIZE = DIM / HEADS;
const KV_DIM = KV_HEADS * HEAD_SIZE;
const VOCAB = 512;
const SEQ_LEN = 512;
// Floats in stories260K.bin after the 28-byte header, and how many of them are RoPE tables the
// converter drops (freq_cis_real + freq_cis_imag: seq_len x head_size/2 each).
const CHECKPOINT_FLOATS = 264128;
const ROPE_TABLE_FLOATS = SEQ_LEN * HEAD_SIZE;

const checkpoint = (): string => path.join(modelPath('stories260K'), 'stories260K.bin');
const tokenizerModel = (): string => path.join(modelPath('stories260K'), 'tok512.model');

async function conversionError(promise: Promise<unknown>): Promise<ModelError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ModelError);
  expect((err as ModelError).code).toBe('STRATA_CONVERT');
  return err as ModelError;
}

/** Float32 values of the tensor `name` in a safetensors file. */
function tensorData(file: Buffer, header: SafetensorsHeader, name: string): Float32Array {
  const t = header.tensors.find((x) => x.name === name);
  if (t === undefined) throw new Error(`no tensor ${name}`);
  const [begin, end] = t.entry.data_offsets;
  const start = 8 + header.headerBytes + begin;
  return new Float32Array(
    file.buffer.slice(file.byteOffset + start, file.byteOffset + 8 + header.headerBytes + end),
  );
}

describe.skipIf(!stories.path)(`convertLlama2c on stories260K${stories.skipped}`, () => {
  let out: string;
  let result: ConvertResult;
  const progress: string[] = [];

  beforeAll(async () => {
    out = await dirs.make('strata-stories260k-');
    result = await convertLlama2c({
      checkpoint: checkpoint(),
      tokenizerModel: tokenizerModel(),
      outDir: out,
      onProgress: (line) => progress.push(line),
    });
  });

  it('reads the checkpoint header', () => {
    expect(result.config).toEqual({
      dim: DIM,
      hiddenDim: HIDDEN,
      nLayers: LAYERS,
      nHeads: HEADS,
      nKvHeads: KV_HEADS,
      vocabSize: VOCAB,
      seqLen: SEQ_LEN,
      sharedClassifier: true,
    });
    expect(progress[0]).toBe(
      `read ${checkpoint()}: dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, vocab 512, seq_len 512, shared classifier`,
    );
  });

  it('reports the files it wrote with their real sizes', async () => {
    const names = [
      'config.json',
      'generation_config.json',
      'model.safetensors',
      'tokenizer.json',
      'tokenizer_config.json',
    ];
    expect(result.files.map((f) => f.path)).toEqual(names.map((n) => path.join(out, n)));
    for (const f of result.files) expect(f.bytes).toBe((await stat(f.path)).size);
  });

  it('writes a Llama config.json with tied embeddings and llama2.c constants', async () => {
    expect(await readJsonFile(path.join(out, 'config.json'))).toEqual({
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      hidden_size: DIM,
      intermediate_size: HIDDEN,
      num_hidden_layers: LAYERS,
      num_attention_heads: HEADS,
      num_key_value_heads: KV_HEADS,
      head_dim: HEAD_SIZE,
      vocab_size: VOCAB,
      max_position_embeddings: SEQ_LEN,
      hidden_act: 'silu',
      rms_norm_eps: 1e-5,
      rope_theta: 10000,
      rope_scaling: null,
      attention_bias: false,
      attention_dropout: 0,
      mlp_bias: false,
      tie_word_embeddings: true,
      bos_token_id: 1,
      eos_token_id: 2,
      initializer_range: 0.02,
      pretraining_tp: 1,
      use_cache: true,
      torch_dtype: 'float32',
    });
    expect(await readJsonFile(path.join(out, 'generation_config.json'))).toEqual({
      bos_token_id: 1,
      eos_token_id: 2,
    });
  });

  it('writes a well-formed safetensors file: names, shapes, contiguous offsets, sizes that add up', async () => {
    const file = path.join(out, 'model.safetensors');
    const header = await readSafetensorsHeader(file);
    const expected: [string, number[]][] = [['model.embed_tokens.weight', [VOCAB, DIM]]];
    for (let l = 0; l < LAYERS; l += 1) {
      const p = `model.layers.${l}`;
      expected.push(
        [`${p}.input_layernorm.weight`, [DIM]],
        [`${p}.self_attn.q_proj.weight`, [DIM, DIM]],
        [`${p}.self_attn.k_proj.weight`, [KV_DIM, DIM]],
        [`${p}.self_attn.v_proj.weight`, [KV_DIM, DIM]],
        [`${p}.self_attn.o_proj.weight`, [DIM, DIM]],
        [`${p}.post_attention_layernorm.weight`, [DIM]],
        [`${p}.mlp.gate_proj.weight`, [HIDDEN, DIM]],
        [`${p}.mlp.up_proj.weight`, [HIDDEN, DIM]],
        [`${p}.mlp.down_proj.weight`, [DIM, HIDDEN]],
      );
    }
    expected.push(['model.norm.weight', [DIM]]);
    expect(header.tensors.map((t) => [t.name, t.entry.shape])).toEqual(expected);
    expect(header.metadata).toEqual({ format: 'pt' });
    expect(header.headerBytes % 8).toBe(0);

    let offset = 0;
    for (const { entry } of header.tensors) {
      expect(entry.dtype).toBe('F32');
      expect(entry.data_offsets).toEqual([offset, offset + 4 * entry.shape.reduce((a, b) => a * b, 1)]);
      offset = entry.data_offsets[1];
    }
    // Every checkpoint float is there except the RoPE tables; the shared classifier is not duplicated.
    expect(offset).toBe(4 * (CHECKPOINT_FLOATS - ROPE_TABLE_FLOATS));
    expect((await stat(file)).size).toBe(8 + header.headerBytes + offset);
  });

  it('copies weights unchanged except for the per-head row order of q and k', async () => {
    const ckpt = await readFile(checkpoint());
    const floats = new Float32Array(ckpt.buffer.slice(ckpt.byteOffset + 28, ckpt.byteOffset + ckpt.length));
    const file = await readFile(path.join(out, 'model.safetensors'));
    const header = await readSafetensorsHeader(path.join(out, 'model.safetensors'));
    // Offsets (floats) of the layer-stacked blocks in the checkpoint.
    const emb = 0;
    const wq = emb + VOCAB * DIM + LAYERS * DIM;
    const wk = wq + LAYERS * DIM * DIM;
    const wv = wk + LAYERS * KV_DIM * DIM;
    const ckptRow = (block: number, layer: number, rows: number, row: number): Float32Array =>
      floats.subarray(block + (layer * rows + row) * DIM, block + (layer * rows + row + 1) * DIM);

    expect(tensorData(file, header, 'model.embed_tokens.weight')).toEqual(floats.subarray(emb, VOCAB * DIM));
    for (const layer of [0, LAYERS - 1]) {
      const q = tensorData(file, header, `model.layers.${layer}.self_attn.q_proj.weight`);
      const k = tensorData(file, header, `model.layers.${layer}.self_attn.k_proj.weight`);
      const v = tensorData(file, header, `model.layers.${layer}.self_attn.v_proj.weight`);
      const hfRow = (w: Float32Array, row: number): Float32Array => w.subarray(row * DIM, (row + 1) * DIM);
      for (let h = 0; h < HEADS; h += 1) {
        for (let r = 0; r < HEAD_SIZE; r += 1) {
          // HF pairs (r, r + hs/2) are llama2.c's adjacent pairs (2r, 2r + 1).
          const from = r < HEAD_SIZE / 2 ? 2 * r : 2 * (r - HEAD_SIZE / 2) + 1;
          expect(hfRow(q, h * HEAD_SIZE + r)).toEqual(ckptRow(wq, layer, DIM, h * HEAD_SIZE + from));
          if (h < KV_HEADS) {
            expect(hfRow(k, h * HEAD_SIZE + r)).toEqual(ckptRow(wk, layer, KV_DIM, h * HEAD_SIZE + from));
            expect(hfRow(v, h * HEAD_SIZE + r)).toEqual(ckptRow(wv, layer, KV_DIM, h * HEAD_SIZE + r));
          }
        }
      }
    }
  });

  it('writes a tokenizer that encodes exactly as SentencePiece does (golden pairs)', async () => {
    const golden = (await readJsonFile(
      path.join(import.meta.dirname, 'golden', 'stories260k.json'),
    )) as unknown as Golden;
    const tok = await Tokenizer.load(out);
    expect(golden.tokenizer.cases.length).toBeGreaterThanOrEqual(10);
    for (const { text, ids } of golden.tokenizer.cases) {
      expect(await tok.encode(text, { addSpecialTokens: false })).toEqual(ids);
      expect(await tok.encode(text)).toEqual([golden.tokenizer.bos_id, ...ids]);
      // SentencePiece trims and collapses spaces (remove_extra_whitespaces), so those do not come back.
      expect(tok.decode(ids)).toBe(text.replace(/ {2,}/g, ' ').replace(/^ +| +$/g, ''));
    }
    for (const { text, prompt_ids } of golden.prompts) expect(await tok.encode(text)).toEqual(prompt_ids);
  });

  it('writes tokenizer and generation configs the model-files reader accepts', async () => {
    const files = await loadModelFiles(out);
    expect({
      bos: files.bosTokenId,
      eos: files.eosTokenIds,
      addBos: files.addBosToken,
      addEos: files.addEosToken,
      specials: files.specialTokenIds,
      maxLen: files.maxModelLen,
      byteFallback: files.byteFallback,
    }).toEqual({
      bos: 1,
      eos: [2],
      addBos: true,
      addEos: false,
      specials: [0, 1, 2],
      maxLen: 512,
      byteFallback: true,
    });
  });
});

describe.skipIf(!stories.path)(`convertLlama2c variants and errors${stories.skipped}`, () => {
  it('writes lm_head.weight and tie_word_embeddings false for an unshared classifier', async () => {
    const dir = await dirs.make();
    const ckpt = Buffer.from(await readFile(checkpoint()));
    ckpt.writeInt32LE(-VOCAB, 20); // vocab_size < 0: a separate classifier follows the weights
    const wcls = new Float32Array(VOCAB * DIM).map((_, i) => i / 1000);
    const file = path.join(dir, 'unshared.bin');
    await writeFile(file, Buffer.concat([ckpt, Buffer.from(wcls.buffer)]));
    const out = path.join(dir, 'out');
    const result = await convertLlama2c({ checkpoint: file, tokenizerModel: tokenizerModel(), outDir: out });
    expect(result.config.sharedClassifier).toBe(false);
    expect((await readJsonFile(path.join(out, 'config.json'))).tie_word_embeddings).toBe(false);
    const header = await readSafetensorsHeader(path.join(out, 'model.safetensors'));
    expect(header.tensors.at(-1)?.name).toBe('lm_head.weight');
    expect(tensorData(await readFile(path.join(out, 'model.safetensors')), header, 'lm_head.weight')).toEqual(
      wcls,
    );
  });

  it('rejects a truncated checkpoint, saying what size the header implies', async () => {
    const dir = await dirs.make();
    const file = path.join(dir, 'cut.bin');
    await writeFile(file, (await readFile(checkpoint())).subarray(0, 1000));
    const err = await conversionError(
      convertLlama2c({ checkpoint: file, tokenizerModel: tokenizerModel(), outDir: dir }),
    );
    expect(err.message).toBe(
      `${file} is not a llama2.c legacy checkpoint: the header implies ${28 + 4 * CHECKPOINT_FLOATS} bytes but the file has 1000`,
    );
  });

  it('rejects an implausible header field', async () => {
    const dir = await dirs.make();
    const file = path.join(dir, 'bad.bin');
    const ckpt = Buffer.from(await readFile(checkpoint()));
    ckpt.writeInt32LE(0, 12); // n_heads
    await writeFile(file, ckpt);
    const err = await conversionError(
      convertLlama2c({ checkpoint: file, tokenizerModel: tokenizerModel(), outDir: dir }),
    );
    expect(err.field).toBe('nHeads');
    expect(err.message).toBe(`${file} is not a llama2.c legacy checkpoint: header field nHeads is 0`);
  });

  it.skipIf(!llama2Tokenizer.path)(
    `rejects a tokenizer whose vocabulary does not match the checkpoint${llama2Tokenizer.skipped}`,
    async () => {
      const other = path.join(modelPath('llama2-tokenizer'), 'tokenizer.model');
      const err = await conversionError(
        convertLlama2c({ checkpoint: checkpoint(), tokenizerModel: other, outDir: await dirs.make() }),
      );
      expect(err.message).toBe(`${other} has 32000 pieces but ${checkpoint()} has vocab_size 512`);
    },
  );

  it('rejects a tokenizer file that is not a SentencePiece model', async () => {
    const dir = await dirs.make();
    const file = path.join(dir, 'tok.model');
    await copyFile(checkpoint(), file);
    const err = await conversionError(
      convertLlama2c({ checkpoint: checkpoint(), tokenizerModel: file, outDir: dir }),
    );
    expect(err.message).toMatch(new RegExp(`^${file} is not a SentencePiece model: `));
  });
});

describe.skipIf(!stories.path)(`convert CLI${stories.skipped}`, () => {
  it('converts and prints progress and what it wrote', async () => {
    const out = path.join(await dirs.make(), 'hf');
    const lines: string[] = [];
    const errors: string[] = [];
    const code = await runCli(
      ['llama2c', '--checkpoint', checkpoint(), '--tokenizer', tokenizerModel(), '--out', out],
      {
        out: (l) => lines.push(l),
        err: (l) => errors.push(l),
      },
    );
    expect([code, errors]).toEqual([0, []]);
    const sizes = await Promise.all(
      [
        'config.json',
        'generation_config.json',
        'model.safetensors',
        'tokenizer.json',
        'tokenizer_config.json',
      ].map(async (n) => (await stat(path.join(out, n))).size),
    );
    expect(lines).toHaveLength(8);
    expect(lines[1]).toBe(`read ${tokenizerModel()}: 512 pieces, bos 1, eos 2`);
    expect(lines[4]).toBe(`wrote ${path.join(out, 'model.safetensors')} (47 tensors, ${sizes[2]} bytes)`);
    expect(lines[7]).toBe(`done: 5 files, ${sizes.reduce((a, b) => a + b, 0)} bytes in ${out}`);
  });

  it('exits 2 with usage on bad arguments and 1 on a failed conversion', async () => {
    const errors: string[] = [];
    const io = { out: () => {}, err: (l: string) => errors.push(l) };
    expect(await runCli(['llama2c', '--checkpoint', checkpoint()], io)).toBe(2);
    expect(errors.pop()).toMatch(/^usage:/);
    expect(await runCli(['llama2c', '--bogus', 'x'], io)).toBe(2);
    const missing = path.join(await dirs.make(), 'missing.bin');
    expect(
      await runCli(
        ['llama2c', '--checkpoint', missing, '--tokenizer', tokenizerModel(), '--out', await dirs.make()],
        io,
      ),
    ).toBe(1);
    expect(errors.pop()).toMatch(/^convert failed: ENOENT/);
  });
});
