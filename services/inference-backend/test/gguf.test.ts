// The GGUF metadata reader: on the real files (tinystories-656k-f32.gguf, SmolLM2's Q4_1 file),
// on hand-built files with every value type, and on broken files, each of which must fail with a
// ModelError that names the file and the problem.
import { stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelError } from '../src/model/errors.js';
import { type GgufArray, readGguf } from '../src/model/gguf.js';
import { GgufWriter, ggufBytes, type Kv, strings } from './support/gguf-writer.js';
import { optionalModel, smollm2Gguf } from './support/models.js';
import { TempDirs } from './support/temp-model.js';

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

async function tempFile(bytes: Uint8Array, name = 'model.gguf'): Promise<string> {
  const file = path.join(await dirs.make('strata-gguf-'), name);
  await writeFile(file, bytes);
  return file;
}

/** The ModelError reading `bytes` fails with (the test fails if it succeeds or throws something else). */
async function readError(bytes: Uint8Array): Promise<{ err: ModelError; file: string }> {
  const file = await tempFile(bytes);
  const err = await readGguf(file).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ModelError);
  const e = err as ModelError;
  expect(e.code).toBe('STRATA_MODEL_FILES');
  expect(e.file).toBe(file);
  expect(e.message.startsWith(`${file}: `)).toBe(true);
  return { err: e, file };
}

const tiny = optionalModel('tinystories-656k-gguf/tinystories-656k-f32.gguf');
const smol = smollm2Gguf();

describe.skipIf(!tiny.path)(`readGguf on tinystories-656k-f32.gguf${tiny.skipped}`, () => {
  it('reads the header, the metadata and the tensor infos', async () => {
    const file = tiny.path as string;
    const gguf = await readGguf(file);
    const { size } = await stat(file);
    expect(gguf.version).toBe(3);
    expect(gguf.fileSize).toBe(size);
    expect(gguf.string('general.architecture')).toBe('llama');
    expect(gguf.string('tokenizer.ggml.model')).toBe('llama');
    expect(gguf.uint('llama.context_length')).toBe(512);
    expect(gguf.uint('llama.vocab_size')).toBe(2048);
    expect(gguf.metadata.get('llama.rope.freq_base')).toEqual({
      key: 'llama.rope.freq_base',
      type: 'float32',
      value: 10000,
    });
    const tokens = gguf.strings('tokenizer.ggml.tokens', true);
    expect(tokens).toHaveLength(2048);
    expect(tokens.slice(0, 4)).toEqual(['<unk>', '<|start_story|>', '<|end_story|>', '\n']);
    expect(gguf.numbers('tokenizer.ggml.scores')).toHaveLength(2048);
    expect(gguf.numbers('tokenizer.ggml.token_type')?.slice(0, 4)).toEqual([3, 3, 3, 1]);
    expect(gguf.bool('tokenizer.ggml.add_bos_token')).toBe(true);
    // The same shape as the Hugging Face layout: hidden 128, 2 layers, GQA 8/4 heads of 16.
    expect(gguf.tensors).toHaveLength(20);
    expect(gguf.tensorTypeCounts()).toEqual({ F32: 20 });
    const byName = new Map(gguf.tensors.map((t) => [t.name, t]));
    expect(byName.get('token_embd.weight')).toMatchObject({ dims: [128, 2048], typeName: 'F32', offset: 0 });
    expect(byName.get('blk.1.attn_k.weight')?.dims).toEqual([128, 64]);
    expect(byName.get('blk.0.ffn_down.weight')?.dims).toEqual([384, 128]);
    // The data section ends where the file does: the last tensor's end is the file's end.
    expect(gguf.dataOffset % gguf.alignment).toBe(0);
    const end = Math.max(...gguf.tensors.map((t) => gguf.dataOffset + t.offset + t.bytes));
    expect(end).toBe(size);
  });
});

describe.skipIf(!smol.path)(`readGguf on SmolLM2-135M-Instruct Q4_1${smol.skipped}`, () => {
  it('reads a 49,152-token vocabulary and its merges from the first few MB of a 98 MB file', async () => {
    const gguf = await readGguf(smol.path as string);
    expect(gguf.strings('tokenizer.ggml.tokens', true)).toHaveLength(49152);
    expect(gguf.strings('tokenizer.ggml.merges', true)).toHaveLength(48900);
    expect(gguf.string('tokenizer.ggml.pre')).toBe('smollm');
    expect(gguf.uint('general.file_type')).toBe(3); // MOSTLY_Q4_1
    expect(gguf.tensorTypeCounts()).toEqual({ F32: 61, Q4_1: 210, Q8_0: 1 });
    expect(gguf.tensors.find((t) => t.name === 'token_embd.weight')).toMatchObject({
      dims: [576, 49152],
      typeName: 'Q8_0',
      bytes: (576 / 32) * 34 * 49152,
    });
    expect(gguf.bytesRead).toBeLessThan(4 * 2 ** 20);
    expect(gguf.fileSize).toBeGreaterThan(90 * 2 ** 20);
  });
});

// Every value type once, arrays of strings and of arrays included.
const ALL_TYPES: Kv[] = [
  ['t.u8', 'uint8', 255],
  ['t.i8', 'int8', -128],
  ['t.u16', 'uint16', 65535],
  ['t.i16', 'int16', -32768],
  ['t.u32', 'uint32', 4294967295],
  ['t.i32', 'int32', -2147483648],
  ['t.f32', 'float32', 1.5],
  ['t.bool', 'bool', true],
  ['t.str', 'string', 'héllo 😀'],
  ['t.u64', 'uint64', 18446744073709551615n],
  ['t.i64', 'int64', -9223372036854775808n],
  ['t.f64', 'float64', Math.PI],
  ['t.strs', 'array', strings(['', 'a b', 'ü'])],
  ['t.u64s', 'array', { itemType: 'uint64', items: [1n, 2n ** 40n] }],
  ['t.bools', 'array', { itemType: 'bool', items: [false, true] }],
  [
    't.nested',
    'array',
    {
      itemType: 'array',
      items: [
        { itemType: 'int16', items: [-1, 2] },
        { itemType: 'string', items: ['x'] },
      ],
    },
  ],
  ['t.empty', 'array', { itemType: 'float64', items: [] }],
];

describe('readGguf on hand-built files', () => {
  it('reads every value type, in file order', async () => {
    const gguf = await readGguf(await tempFile(ggufBytes(ALL_TYPES)));
    expect([...gguf.metadata.keys()]).toEqual(ALL_TYPES.map(([key]) => key));
    for (const [key, type, value] of ALL_TYPES)
      expect(gguf.metadata.get(key), key).toEqual({ key, type, value });
    expect(gguf.tensors).toEqual([]);
  });

  it('reads tensor infos with their sizes, and the data offset after them (default and set alignment)', async () => {
    const tensors = [
      { name: 'a', dims: [64, 3], type: 3, bytes: (64 / 32) * 20 * 3 }, // Q4_1
      { name: 'b', dims: [7], type: 0, bytes: 28 }, // F32
      { name: 'c', dims: [256, 2], type: 14, bytes: 2 * 210 }, // Q6_K
    ];
    const file = await tempFile(ggufBytes([['general.name', 'string', 'x']], tensors));
    const gguf = await readGguf(file);
    expect(gguf.tensors.map((t) => [t.name, t.typeName, t.dims, t.bytes])).toEqual([
      ['a', 'Q4_1', [64, 3], 120],
      ['b', 'F32', [7], 28],
      ['c', 'Q6_K', [256, 2], 420],
    ]);
    expect(gguf.tensors.map((t) => t.offset)).toEqual([0, 128, 160]);
    expect(gguf.alignment).toBe(32);
    expect(gguf.dataOffset % 32).toBe(0);

    const aligned = ggufBytes(
      [['general.alignment', 'uint32', 64]],
      [{ name: 'w', dims: [4], type: 0, bytes: 16 }],
      {
        alignment: 64,
      },
    );
    const g64 = await readGguf(await tempFile(aligned));
    expect(g64.alignment).toBe(64);
    expect(g64.dataOffset % 64).toBe(0);
    expect(g64.dataOffset + 64).toBe(aligned.length);
  });

  it('reads metadata larger than its first read, and stops short of the tensor data', async () => {
    // ~3.9 MB of strings, then 8 MB of tensor data.
    const items = Array.from({ length: 200_000 }, (_, i) => `token-${i}`);
    const bytes = ggufBytes(
      [
        ['tokenizer.ggml.tokens', 'array', strings(items)],
        ['after', 'uint32', 7],
      ],
      [{ name: 'big', dims: [2 ** 21], type: 0, bytes: 2 ** 23 }],
    );
    const gguf = await readGguf(await tempFile(bytes));
    const tokens = gguf.strings('tokenizer.ggml.tokens', true);
    expect(tokens).toHaveLength(200_000);
    expect([tokens[0], tokens[123_456], tokens[199_999]]).toEqual([
      'token-0',
      'token-123456',
      'token-199999',
    ]);
    expect(gguf.uint('after')).toBe(7);
    expect(gguf.bytesRead).toBeGreaterThan(gguf.dataOffset - 1);
    expect(gguf.bytesRead).toBeLessThan(bytes.length - 2 ** 22);
  });

  it('says which key has the wrong type when a caller asks for another', async () => {
    const file = await tempFile(ggufBytes(ALL_TYPES));
    const gguf = await readGguf(file);
    expect(() => gguf.string('t.u32')).toThrow(`${file}: GGUF key "t.u32" should be a string, not uint32`);
    expect(() => gguf.strings('t.u64s')).toThrow(
      `${file}: GGUF key "t.u64s" should be an array of strings, not an array of uint64`,
    );
    expect(() => gguf.uint('t.i8')).toThrow(/"t\.i8" should be a non-negative integer/);
    expect(() => gguf.uint('t.u64')).toThrow(/"t\.u64" should be a non-negative integer/); // past 2^53
    expect(() => gguf.uint('nope', true)).toThrow(`${file}: GGUF key "nope" is missing`);
    expect(gguf.uint('nope')).toBe(null);
    expect(gguf.numbers('t.u64s')).toEqual([1, 2 ** 40]);
    expect((gguf.value('t.nested') as GgufArray).items).toHaveLength(2);
  });
});

describe('readGguf on broken files', () => {
  const kvs: Kv[] = [
    ['general.architecture', 'string', 'llama'],
    ['tokenizer.ggml.tokens', 'array', strings(['a', 'bc', 'def'])],
    ['llama.context_length', 'uint32', 64],
  ];
  const whole = ggufBytes(kvs, [{ name: 'w', dims: [8, 2], type: 0, bytes: 64 }]);

  it('fails on every truncation of a file, saying it is truncated and where', async () => {
    const file = await tempFile(whole);
    await expect(readGguf(file)).resolves.toBeDefined();
    // Every cut: in the magic, the counts, a key, a value type, a string, an array, a tensor info
    // and the tensor data.
    for (let cut = 0; cut < whole.length; cut += 1) {
      const { err } = await readError(whole.subarray(0, cut));
      expect(err.message, `cut at ${cut}`).toMatch(/: truncated/);
    }
  });

  it('names the part that is cut off', async () => {
    const one = ggufBytes([['general.architecture', 'string', 'llama']]);
    const keyEnd = 4 + 4 + 8 + 8 + 8 + 'general.architecture'.length;
    expect((await readError(one.subarray(0, 2))).err.message).toMatch(
      /truncated: the magic number \(4 bytes at offset 0\) runs past the end of the file \(2 bytes\)$/,
    );
    expect((await readError(one.subarray(0, keyEnd + 2))).err.message).toMatch(
      /truncated: the value type of "general.architecture" \(4 bytes at offset 52\) runs past the end/,
    );
    expect((await readError(one.subarray(0, keyEnd + 4 + 8 + 3))).err.message).toMatch(
      /truncated: the value of "general.architecture" \(a string of 5 bytes, length at offset 56\) runs past the end of the file \(3 bytes follow\)$/,
    );
    expect((await readError(one.subarray(0, 20))).err.message).toMatch(
      /truncated: the metadata key\/value count \(8 bytes at offset 16\)/,
    );
    const { err } = await readError(whole.subarray(0, whole.length - 10));
    expect(err.message).toMatch(
      /truncated: tensor "w" \(F32 \[8, 2\], 64 bytes at \d+\) ends at byte \d+, past the end/,
    );
  });

  it('rejects a file that is not GGUF', async () => {
    const bytes = Buffer.from(whole);
    bytes.write('GGML', 0, 'latin1');
    const { err } = await readError(bytes);
    expect(err.message).toMatch(/: not a GGUF file: it starts with "GGML" \(hex 47474d4c\), not "GGUF"$/);
    const json = await readError(Buffer.from('{"model_type": "llama"}'));
    expect(json.err.message).toMatch(/not a GGUF file: it starts with "\{\\"mo"/);
  });

  it('rejects version 1 and says that a byte-swapped version looks big-endian', async () => {
    const v1 = new GgufWriter().header({ tensors: 0, kvs: 0, version: 1 }).bytes();
    expect((await readError(v1)).err.message).toMatch(
      /: GGUF version 1 is not supported; versions 2 and 3 are$/,
    );
    const be = Buffer.from(whole);
    be.writeUInt32BE(3, 4);
    expect((await readError(be)).err.message).toMatch(
      /GGUF version 50331648 is not supported \(a big-endian/,
    );
  });

  it('rejects a string length past the end of the file', async () => {
    const bytes = new GgufWriter()
      .header({ tensors: 0, kvs: 1 })
      .string('general.name')
      .u32(8)
      .u64(2n ** 63n)
      .raw(Buffer.from('short'))
      .bytes();
    const { err } = await readError(bytes);
    expect(err.message).toMatch(
      /truncated: the value of "general.name" \(a string of 9223372036854775808 bytes, length at offset 48\) runs past the end of the file \(5 bytes follow\)$/,
    );
    // And a key whose length is past the end.
    const key = new GgufWriter()
      .header({ tensors: 0, kvs: 1 })
      .u64(1000)
      .raw(Buffer.from('abcdefgh'))
      .bytes();
    expect((await readError(key)).err.message).toMatch(
      /the key of metadata entry 0 \(a string of 1000 bytes/,
    );
  });

  it('rejects an unknown value type, also as an array item type', async () => {
    const scalar = new GgufWriter().header({ tensors: 0, kvs: 1 }).string('x.y').u32(13).u32(0).bytes();
    expect((await readError(scalar)).err.message).toMatch(
      /: the value type of "x\.y" at offset 35 is 13, not a GGUF value type \(0\.\.12\)$/,
    );
    const array = new GgufWriter().header({ tensors: 0, kvs: 1 }).string('x.y').u32(9).u32(99).u64(0).bytes();
    expect((await readError(array)).err.message).toMatch(/the item type of the value of "x\.y" .* is 99/);
  });

  it('rejects counts that cannot fit in the file before allocating anything', async () => {
    const kvCount = new GgufWriter().header({ tensors: 0, kvs: 2 ** 40 }).bytes();
    expect((await readError(kvCount)).err.message).toMatch(
      /truncated or corrupt: the metadata key\/value count at offset 16 is 1099511627776, but only 0 bytes follow/,
    );
    const items = new GgufWriter()
      .header({ tensors: 0, kvs: 1 })
      .string('t')
      .u32(9)
      .u32(8) // array of strings
      .u64(2n ** 62n)
      .bytes();
    expect((await readError(items)).err.message).toMatch(
      /the item count of the value of "t" at offset \d+ is 4611686018427387904/,
    );
  });

  it('rejects a bool that is neither 0 nor 1, and a duplicate key', async () => {
    const bool = new GgufWriter().header({ tensors: 0, kvs: 1 }).string('b').u32(7).u8(2).bytes();
    expect((await readError(bool)).err.message).toMatch(
      /the value of "b" at offset \d+ is a bool of value 2/,
    );
    const dup = new GgufWriter()
      .header({ tensors: 0, kvs: 2 })
      .kv('k', 'uint8', 1)
      .kv('k', 'uint8', 2)
      .bytes();
    expect((await readError(dup)).err.message).toMatch(/metadata key "k" appears twice/);
  });

  it('rejects bad tensor infos: unknown type, too many dims, a partial block, a misaligned offset', async () => {
    const info = (dims: number[], type: number, offset = 0) => {
      const w = new GgufWriter().header({ tensors: 1, kvs: 0 }).tensorInfo('t', dims, type, offset).align(32);
      return w.raw(Buffer.alloc(4096)).bytes();
    };
    expect((await readError(info([4], 4))).err.message).toMatch(/tensor "t" has unknown ggml type 4$/);
    expect((await readError(info([1, 1, 1, 1, 1], 0))).err.message).toMatch(
      /tensor "t" has 5 dimensions; at most 4/,
    );
    expect((await readError(info([48], 3))).err.message).toMatch(
      /tensor "t" \(Q4_1\) has a row of 48 elements, not a multiple of its block size 32/,
    );
    expect((await readError(info([4], 0, 16))).err.message).toMatch(
      /data offset 16 is not a multiple of the alignment 32/,
    );
    expect((await readError(info([4], 0, 2 ** 40))).err.message).toMatch(
      /data offset 1099511627776, past the end/,
    );
  });

  it('names a file that does not exist', async () => {
    const file = path.join(await dirs.make(), 'missing.gguf');
    await expect(readGguf(file)).rejects.toMatchObject({
      code: 'STRATA_MODEL_FILES',
      file,
      message: `${file} does not exist`,
    });
  });
});
