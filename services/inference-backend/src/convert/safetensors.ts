// The safetensors file format, written and read back (header only). Layout:
//   u64 little-endian N | N bytes of JSON header, space-padded to a multiple of 8 | tensor data
// The header maps each tensor name to {dtype, shape, data_offsets: [begin, end)} with offsets in
// bytes relative to the start of the data section; "__metadata__" holds string -> string.

import { open } from 'node:fs/promises';
import { z } from 'zod';
import { ModelError } from '../model/errors.js';

export interface F32Tensor {
  name: string;
  /** Row-major, outermost first: (out_features, in_features) for a Linear weight. */
  shape: readonly number[];
  data: Float32Array;
}

/** A tensor already encoded: `data` holds its values in `dtype`, little-endian, row-major. */
export interface EncodedTensor {
  name: string;
  shape: readonly number[];
  dtype: 'F32' | 'F16' | 'BF16';
  data: Uint8Array;
}

const ITEM_BYTES = { F32: 4, F16: 2, BF16: 2 } as const;

const tensorEntrySchema = z.object({
  dtype: z.string(),
  shape: z.array(z.number().int().nonnegative()),
  data_offsets: z.tuple([z.number().int().nonnegative(), z.number().int().nonnegative()]),
});
export type SafetensorsEntry = z.output<typeof tensorEntrySchema>;

export interface SafetensorsHeader {
  /** Bytes of the JSON header (N), padding included; data starts at 8 + N. */
  headerBytes: number;
  metadata: Record<string, string>;
  /** In file order of their data. */
  tensors: { name: string; entry: SafetensorsEntry }[];
}

const HEADER_ALIGN = 8;

/**
 * Writes `tensors` to `file` (data in the given order): fp32 arrays, or values already encoded in
 * F32, F16 or BF16. Returns the file's size in bytes.
 */
export async function writeSafetensors(
  file: string,
  tensors: readonly (F32Tensor | EncodedTensor)[],
  metadata: Record<string, string> = { format: 'pt' },
): Promise<number> {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  const encoded = tensors.map((t): EncodedTensor => {
    if ('dtype' in t) return t;
    // Float32Array bytes are host order; every platform this runs on is little-endian, as the format wants.
    return { ...t, dtype: 'F32', data: new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength) };
  });
  for (const t of encoded) {
    const elements = t.shape.reduce((a, b) => a * b, 1);
    const values = t.data.byteLength / ITEM_BYTES[t.dtype];
    if (elements !== values) {
      throw new Error(
        `tensor ${t.name}: shape [${t.shape.join(', ')}] needs ${elements} values, has ${values}`,
      );
    }
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  const jsonBytes = Buffer.byteLength(json, 'utf8');
  json += ' '.repeat((HEADER_ALIGN - (jsonBytes % HEADER_ALIGN)) % HEADER_ALIGN);
  const headerBuf = Buffer.from(json, 'utf8');
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(headerBuf.length));

  const handle = await open(file, 'w');
  try {
    await handle.write(prefix);
    await handle.write(headerBuf);
    for (const t of encoded) await handle.write(t.data);
  } finally {
    await handle.close();
  }
  return 8 + headerBuf.length + offset;
}

/** Reads and checks the header of a safetensors file; throws ModelError STRATA_MODEL_FILES naming the file. */
export async function readSafetensorsHeader(file: string): Promise<SafetensorsHeader> {
  const fail = (why: string): ModelError =>
    new ModelError('STRATA_MODEL_FILES', `${file} is not a safetensors file: ${why}`, { file });
  const handle = await open(file, 'r');
  let bytes: Buffer;
  let headerBytes: number;
  try {
    const size = (await handle.stat()).size;
    const prefix = Buffer.alloc(8);
    if (size < 8 || (await handle.read(prefix, 0, 8, 0)).bytesRead < 8) {
      throw fail('shorter than the 8-byte header length');
    }
    headerBytes = Number(prefix.readBigUInt64LE(0));
    if (8 + headerBytes > size) throw fail(`header length ${headerBytes} exceeds the file (${size} bytes)`);
    bytes = Buffer.alloc(headerBytes);
    await handle.read(bytes, 0, headerBytes, 8);
  } finally {
    await handle.close();
  }
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw fail(`header is not JSON (${(err as Error).message})`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    throw fail('header is not a JSON object');
  let metadata: Record<string, string> = {};
  const tensors: SafetensorsHeader['tensors'] = [];
  for (const [name, value] of Object.entries(json)) {
    if (name === '__metadata__') {
      const parsed = z.record(z.string(), z.string()).safeParse(value);
      if (!parsed.success) throw fail('__metadata__ is not a string map');
      metadata = parsed.data;
      continue;
    }
    const parsed = tensorEntrySchema.safeParse(value);
    if (!parsed.success) throw fail(`entry "${name}" is malformed`);
    tensors.push({ name, entry: parsed.data });
  }
  tensors.sort((a, b) => a.entry.data_offsets[0] - b.entry.data_offsets[0]);
  return { headerBytes, metadata, tensors };
}
