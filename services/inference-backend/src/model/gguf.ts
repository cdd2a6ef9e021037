// A GGUF file's metadata, read without its tensor data: the header, every key/value (all value
// types, arrays of any of them included) and the tensor infos (name, dims, type, offset). Only
// the leading part of the file that holds the metadata is read: it is read in growing chunks,
// and parsing restarts on a longer chunk when it runs past the end of the current one (parsing
// a few MB twice costs milliseconds; a 49,152-token vocabulary needs about 1.5 MB).
//
// Every length and count is checked against the file size before it is used, so a truncated
// or corrupt file fails with a ModelError naming the file, the place and the problem, never a
// RangeError or a huge allocation. Format: github.com/ggml-org/ggml docs/gguf.md (v2 and v3:
// little-endian, 64-bit counts and lengths; v1's 32-bit ones are refused).

import { type FileHandle, open } from 'node:fs/promises';
import { ModelError } from './errors.js';

/** GGUF metadata value types, by their on-disk id. */
export const GGUF_VALUE_TYPES = [
  'uint8',
  'int8',
  'uint16',
  'int16',
  'uint32',
  'int32',
  'float32',
  'bool',
  'string',
  'array',
  'uint64',
  'int64',
  'float64',
] as const;
export type GgufValueType = (typeof GGUF_VALUE_TYPES)[number];

/** 64-bit integers are bigints; every other number is a JS number. */
export type GgufScalar = number | bigint | boolean | string;
export type GgufValue = GgufScalar | GgufArray;

export interface GgufArray {
  /** The element type; nested arrays are allowed by the format. */
  readonly itemType: GgufValueType;
  readonly items: readonly GgufValue[];
}

export interface GgufEntry {
  readonly key: string;
  readonly type: GgufValueType;
  readonly value: GgufValue;
}

/** A ggml tensor type: the elements one block holds and that block's size in bytes. */
interface TensorType {
  readonly name: string;
  readonly blockSize: number;
  readonly typeSize: number;
}

const QK_K = 256;
/** ggml's tensor types by id (gguf-py GGMLQuantizationType and GGML_QUANT_SIZES); gaps were removed from the format. */
const TENSOR_TYPES: ReadonlyMap<number, TensorType> = new Map(
  (
    [
      [0, 'F32', 1, 4],
      [1, 'F16', 1, 2],
      [2, 'Q4_0', 32, 2 + 16],
      [3, 'Q4_1', 32, 2 + 2 + 16],
      [6, 'Q5_0', 32, 2 + 4 + 16],
      [7, 'Q5_1', 32, 2 + 2 + 4 + 16],
      [8, 'Q8_0', 32, 2 + 32],
      [9, 'Q8_1', 32, 2 + 2 + 32],
      [10, 'Q2_K', QK_K, 2 + 2 + QK_K / 16 + QK_K / 4],
      [11, 'Q3_K', QK_K, 2 + QK_K / 4 + QK_K / 8 + 12],
      [12, 'Q4_K', QK_K, 2 + 2 + QK_K / 2 + 12],
      [13, 'Q5_K', QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12],
      [14, 'Q6_K', QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16],
      [15, 'Q8_K', QK_K, 4 + QK_K + QK_K / 8],
      [16, 'IQ2_XXS', QK_K, 2 + QK_K / 4],
      [17, 'IQ2_XS', QK_K, 2 + QK_K / 4 + QK_K / 32],
      [18, 'IQ3_XXS', QK_K, 2 + QK_K / 4 + QK_K / 8],
      [19, 'IQ1_S', QK_K, 2 + QK_K / 8 + QK_K / 16],
      [20, 'IQ4_NL', 32, 2 + 16],
      [21, 'IQ3_S', QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4],
      [22, 'IQ2_S', QK_K, 2 + QK_K / 4 + QK_K / 16],
      [23, 'IQ4_XS', QK_K, 2 + 2 + QK_K / 2 + QK_K / 64],
      [24, 'I8', 1, 1],
      [25, 'I16', 1, 2],
      [26, 'I32', 1, 4],
      [27, 'I64', 1, 8],
      [28, 'F64', 1, 8],
      [29, 'IQ1_M', QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32],
      [30, 'BF16', 1, 2],
      [34, 'TQ1_0', QK_K, 2 + 4 * 13],
      [35, 'TQ2_0', QK_K, 2 + 64],
      [39, 'MXFP4', 32, 1 + 16],
      [40, 'NVFP4', 64, 4 + 32],
      [41, 'Q1_0', 128, 2 + 16],
      [42, 'Q2_0', 64, 2 + 16],
    ] as const
  ).map(([id, name, blockSize, typeSize]) => [id, { name, blockSize, typeSize }]),
);

/** general.file_type (llama.cpp's llama_ftype) -> the quantization name llama.cpp prints. */
const FILE_TYPES: ReadonlyMap<number, string> = new Map([
  [0, 'F32'],
  [1, 'F16'],
  [2, 'Q4_0'],
  [3, 'Q4_1'],
  [7, 'Q8_0'],
  [8, 'Q5_0'],
  [9, 'Q5_1'],
  [10, 'Q2_K'],
  [11, 'Q3_K_S'],
  [12, 'Q3_K_M'],
  [13, 'Q3_K_L'],
  [14, 'Q4_K_S'],
  [15, 'Q4_K_M'],
  [16, 'Q5_K_S'],
  [17, 'Q5_K_M'],
  [18, 'Q6_K'],
  [19, 'IQ2_XXS'],
  [20, 'IQ2_XS'],
  [21, 'Q2_K_S'],
  [22, 'IQ3_XS'],
  [23, 'IQ3_XXS'],
  [24, 'IQ1_S'],
  [25, 'IQ4_NL'],
  [26, 'IQ3_S'],
  [27, 'IQ3_M'],
  [28, 'IQ2_S'],
  [29, 'IQ2_M'],
  [30, 'IQ4_XS'],
  [31, 'IQ1_M'],
  [32, 'BF16'],
  [36, 'TQ1_0'],
  [37, 'TQ2_0'],
  [38, 'MXFP4_MOE'],
  [39, 'NVFP4'],
  [40, 'Q1_0'],
  [41, 'Q2_0'],
]);

/** The name llama.cpp gives a general.file_type value, or null for one it does not define. */
export function fileTypeName(fileType: number): string | null {
  return FILE_TYPES.get(fileType) ?? null;
}

export interface GgufTensorInfo {
  readonly name: string;
  /** ggml order: dims[0] is the innermost (contiguous) dimension. */
  readonly dims: readonly number[];
  /** ggml type id and name ('Q4_1', 'F32', ...). */
  readonly type: number;
  readonly typeName: string;
  /** Offset of the tensor's data from the start of the data section (GgufFile.dataOffset). */
  readonly offset: number;
  /** Size of the tensor's data in bytes. */
  readonly bytes: number;
}

const MAGIC = 'GGUF';
const SUPPORTED_VERSIONS = [2, 3];
const DEFAULT_ALIGNMENT = 32;
/** GGML_MAX_DIMS. */
const MAX_DIMS = 4;
/** The first read; doubled (or more, as far as parsing needs) until the metadata fits. */
const FIRST_CHUNK = 1 << 20;

/** Minimum on-disk sizes, to check counts against the bytes left before allocating anything. */
const MIN_KV_BYTES = 8 + 4 + 1; // empty key, type, smallest value
const MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8; // empty name, n_dims (0), type, offset

export class GgufFile {
  /** The parsed metadata, in file order. */
  readonly metadata: ReadonlyMap<string, GgufEntry>;

  constructor(
    /** The path the file was read from (in every error message). */
    readonly file: string,
    readonly fileSize: number,
    readonly version: number,
    metadata: Map<string, GgufEntry>,
    readonly tensors: readonly GgufTensorInfo[],
    /** general.alignment, else 32. */
    readonly alignment: number,
    /** Where the tensor data section starts: the end of the tensor infos, aligned. */
    readonly dataOffset: number,
    /** How many bytes of the file were read to parse it. */
    readonly bytesRead: number,
  ) {
    this.metadata = metadata;
  }

  has(key: string): boolean {
    return this.metadata.has(key);
  }

  /** The raw value of `key`, or undefined when absent. */
  value(key: string): GgufValue | undefined {
    return this.metadata.get(key)?.value;
  }

  /** A string value; throws when present with another type, or absent and `required`. */
  string(key: string, required: true): string;
  string(key: string, required?: false): string | null;
  string(key: string, required = false): string | null {
    const entry = this.#entry(key, required);
    if (entry === null) return null;
    if (typeof entry.value !== 'string') throw this.#wrongType(entry, 'a string');
    return entry.value;
  }

  /** A bool value (GGUF bool, or an integer 0/1 as some converters write). */
  bool(key: string): boolean | null {
    const entry = this.#entry(key, false);
    if (entry === null) return null;
    if (typeof entry.value === 'boolean') return entry.value;
    if (isIntegerType(entry.type) && (entry.value === 0 || entry.value === 1)) return entry.value === 1;
    throw this.#wrongType(entry, 'a bool');
  }

  /** A non-negative integer of any integer type that fits a JS number. */
  uint(key: string, required: true): number;
  uint(key: string, required?: false): number | null;
  uint(key: string, required = false): number | null {
    const entry = this.#entry(key, required);
    if (entry === null) return null;
    const n = asSafeInteger(entry.value, entry.type);
    if (n === null || n < 0) throw this.#wrongType(entry, 'a non-negative integer');
    return n;
  }

  /** An array of strings. */
  strings(key: string, required: true): readonly string[];
  strings(key: string, required?: false): readonly string[] | null;
  strings(key: string, required = false): readonly string[] | null {
    const entry = this.#entry(key, required);
    if (entry === null) return null;
    if (!isArray(entry.value) || entry.value.itemType !== 'string') {
      throw this.#wrongType(entry, 'an array of strings');
    }
    return entry.value.items as readonly string[];
  }

  /** An array of numbers (any integer type that fits a JS number, or floats). */
  numbers(key: string): readonly number[] | null {
    const entry = this.#entry(key, false);
    if (entry === null) return null;
    const value = entry.value;
    if (!isArray(value) || value.itemType === 'string' || value.itemType === 'bool') {
      throw this.#wrongType(entry, 'an array of numbers');
    }
    if (value.itemType === 'array') throw this.#wrongType(entry, 'an array of numbers');
    if (value.itemType === 'uint64' || value.itemType === 'int64') {
      return value.items.map((item) => {
        const n = asSafeInteger(item, value.itemType);
        if (n === null) throw this.#wrongType(entry, 'an array of numbers below 2^53');
        return n;
      });
    }
    return value.items as readonly number[];
  }

  /** Tensor count per ggml type name, e.g. { F32: 61, Q4_1: 210, Q6_K: 1 }. */
  tensorTypeCounts(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const t of this.tensors) counts[t.typeName] = (counts[t.typeName] ?? 0) + 1;
    return counts;
  }

  /** A ModelError about `key` in this file. */
  error(key: string, problem: string): ModelError {
    return new ModelError('STRATA_MODEL_FILES', `${this.file}: GGUF key "${key}" ${problem}`, {
      file: this.file,
      field: key,
    });
  }

  #entry(key: string, required: boolean): GgufEntry | null {
    const entry = this.metadata.get(key);
    if (entry !== undefined) return entry;
    if (required) throw this.error(key, 'is missing');
    return null;
  }

  #wrongType(entry: GgufEntry, expected: string): ModelError {
    const actual = isArray(entry.value) ? `an array of ${entry.value.itemType}` : entry.type;
    return this.error(entry.key, `should be ${expected}, not ${actual}`);
  }
}

function isArray(value: GgufValue): value is GgufArray {
  return typeof value === 'object';
}

function isIntegerType(type: GgufValueType): boolean {
  return type !== 'float32' && type !== 'float64' && type !== 'bool' && type !== 'string' && type !== 'array';
}

function asSafeInteger(value: GgufValue, type: GgufValueType): number | null {
  if (!isIntegerType(type)) return null;
  if (typeof value === 'bigint') {
    return value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= BigInt(Number.MIN_SAFE_INTEGER)
      ? Number(value)
      : null;
  }
  return typeof value === 'number' ? value : null;
}

/**
 * Reads the metadata and tensor infos of the GGUF file at `file`. Throws ModelError
 * STRATA_MODEL_FILES naming the file and the problem: unreadable, not GGUF, an unsupported
 * version, truncated, or a length, count, type or tensor extent that does not fit the file.
 */
export async function readGguf(file: string): Promise<GgufFile> {
  let handle: FileHandle;
  try {
    handle = await open(file, 'r');
  } catch (err) {
    const why =
      (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'does not exist' : `cannot be read (${err})`;
    throw new ModelError('STRATA_MODEL_FILES', `${file} ${why}`, { file, cause: err });
  }
  try {
    const { size } = await handle.stat();
    let buffer = Buffer.alloc(Math.min(size, FIRST_CHUNK));
    let filled = 0;
    for (;;) {
      while (filled < buffer.length) {
        const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, filled);
        if (bytesRead === 0) {
          throw new ModelError('STRATA_MODEL_FILES', `${file}: the file shrank while it was read`, { file });
        }
        filled += bytesRead;
      }
      try {
        return parseGguf(buffer, file, size);
      } catch (err) {
        if (!(err instanceof NeedMore)) throw err;
        const next = Buffer.alloc(Math.min(size, Math.max(err.end, buffer.length * 2)));
        buffer.copy(next, 0, 0, filled);
        buffer = next;
      }
    }
  } finally {
    await handle.close();
  }
}

/** Parsing ran past the bytes read so far (but not past the file): read up to `end` and retry. */
class NeedMore extends Error {
  constructor(readonly end: number) {
    super(`need ${end} bytes`);
  }
}

/**
 * Parses a GGUF file from its first `bytes.length` bytes; `fileSize` is the whole file's size.
 * Throws NeedMore when the metadata continues past `bytes`.
 */
function parseGguf(bytes: Buffer, file: string, fileSize: number): GgufFile {
  const r = new Reader(bytes, file, fileSize);
  const magic = r.bytes(4, 'the magic number').toString('latin1');
  if (magic !== MAGIC) {
    throw r.fail(
      `not a GGUF file: it starts with ${JSON.stringify(magic)} (hex ${Buffer.from(magic, 'latin1').toString('hex')}), not "GGUF"`,
    );
  }
  const version = r.u32('the version');
  if (!SUPPORTED_VERSIONS.includes(version)) {
    const swapped = Buffer.alloc(4);
    swapped.writeUInt32BE(version);
    const hint = SUPPORTED_VERSIONS.includes(swapped.readUInt32LE()) ? ' (a big-endian GGUF file?)' : '';
    throw r.fail(`GGUF version ${version} is not supported${hint}; versions 2 and 3 are`);
  }
  const tensorCount = r.count(MIN_TENSOR_INFO_BYTES, 'the tensor count');
  const kvCount = r.count(MIN_KV_BYTES, 'the metadata key/value count');

  const metadata = new Map<string, GgufEntry>();
  for (let i = 0; i < kvCount; i += 1) {
    const at = r.pos;
    const key = r.string(`the key of metadata entry ${i}`);
    if (metadata.has(key)) throw r.fail(`metadata key "${key}" appears twice (entry ${i}, offset ${at})`);
    const type = r.valueType(`the value type of "${key}"`);
    const value = r.value(type, `the value of "${key}"`);
    metadata.set(key, { key, type, value });
  }

  const tensors: GgufTensorInfo[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i += 1) {
    const name = r.string(`the name of tensor ${i}`);
    if (names.has(name)) throw r.fail(`tensor "${name}" appears twice`);
    names.add(name);
    const nDims = r.u32(`the dimension count of tensor "${name}"`);
    if (nDims > MAX_DIMS)
      throw r.fail(`tensor "${name}" has ${nDims} dimensions; at most ${MAX_DIMS} are allowed`);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d += 1) {
      const n = r.u64(`dimension ${d} of tensor "${name}"`);
      if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw r.fail(`dimension ${d} of tensor "${name}" is ${n}`);
      dims.push(Number(n));
    }
    const typeId = r.u32(`the type of tensor "${name}"`);
    const type = TENSOR_TYPES.get(typeId);
    if (type === undefined) throw r.fail(`tensor "${name}" has unknown ggml type ${typeId}`);
    const offset = r.u64(`the data offset of tensor "${name}"`);
    if (offset > BigInt(fileSize))
      throw r.fail(`tensor "${name}" has data offset ${offset}, past the end of the file`);
    const elements = dims.reduce((a, b) => a * b, 1);
    if ((dims[0] ?? 1) % type.blockSize !== 0) {
      throw r.fail(
        `tensor "${name}" (${type.name}) has a row of ${dims[0]} elements, not a multiple of its block size ${type.blockSize}`,
      );
    }
    const size = (elements / type.blockSize) * type.typeSize;
    tensors.push({ name, dims, type: typeId, typeName: type.name, offset: Number(offset), bytes: size });
  }

  const alignmentEntry = metadata.get('general.alignment');
  let alignment = DEFAULT_ALIGNMENT;
  if (alignmentEntry !== undefined) {
    const a = alignmentEntry.value;
    if (alignmentEntry.type !== 'uint32' || typeof a !== 'number' || a === 0 || (a & (a - 1)) !== 0) {
      throw r.fail(
        `general.alignment should be a uint32 power of two, not ${String(a)} (${alignmentEntry.type})`,
      );
    }
    alignment = a;
  }
  const dataOffset = Math.ceil(r.pos / alignment) * alignment;
  for (const t of tensors) {
    if (t.offset % alignment !== 0) {
      throw r.fail(
        `tensor "${t.name}" data offset ${t.offset} is not a multiple of the alignment ${alignment}`,
      );
    }
    const end = dataOffset + t.offset + t.bytes;
    if (end > fileSize) {
      throw r.fail(
        `truncated: tensor "${t.name}" (${t.typeName} [${t.dims.join(', ')}], ${t.bytes} bytes at ${dataOffset + t.offset}) ` +
          `ends at byte ${end}, past the end of the file (${fileSize} bytes)`,
      );
    }
  }
  return new GgufFile(file, fileSize, version, metadata, tensors, alignment, dataOffset, bytes.length);
}

/** A cursor over the bytes read so far; every read is checked against the file and the buffer. */
class Reader {
  pos = 0;

  constructor(
    private readonly buf: Buffer,
    private readonly file: string,
    private readonly fileSize: number,
  ) {}

  fail(problem: string): ModelError {
    return new ModelError('STRATA_MODEL_FILES', `${this.file}: ${problem}`, { file: this.file });
  }

  /** Checks that `n` bytes of `what` follow; NeedMore when they are in the file but not yet read. */
  need(n: number, what: string): void {
    const end = this.pos + n;
    if (end > this.fileSize) {
      throw this.fail(
        `truncated: ${what} (${n} bytes at offset ${this.pos}) runs past the end of the file (${this.fileSize} bytes)`,
      );
    }
    if (end > this.buf.length) throw new NeedMore(end);
  }

  bytes(n: number, what: string): Buffer {
    this.need(n, what);
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.buf.readUInt32LE(this.pos);
    this.pos += 4;
    return v;
  }

  u64(what: string): bigint {
    this.need(8, what);
    const v = this.buf.readBigUInt64LE(this.pos);
    this.pos += 8;
    return v;
  }

  /** A u64 count of items each at least `minBytes` long, checked against the bytes left in the file. */
  count(minBytes: number, what: string): number {
    const at = this.pos;
    const n = this.u64(what);
    const left = this.fileSize - this.pos;
    if (n * BigInt(minBytes) > BigInt(left)) {
      throw this.fail(
        `truncated or corrupt: ${what} at offset ${at} is ${n}, but only ${left} bytes follow ` +
          `(at least ${minBytes} per item)`,
      );
    }
    return Number(n);
  }

  string(what: string): string {
    const at = this.pos;
    const len = this.u64(`the length of ${what}`);
    const left = this.fileSize - this.pos;
    if (len > BigInt(left)) {
      throw this.fail(
        `truncated: ${what} (a string of ${len} bytes, length at offset ${at}) runs past the end of the file ` +
          `(${left} bytes follow)`,
      );
    }
    const n = Number(len);
    this.need(n, what);
    const s = this.buf.toString('utf8', this.pos, this.pos + n);
    this.pos += n;
    return s;
  }

  valueType(what: string): GgufValueType {
    const at = this.pos;
    const id = this.u32(what);
    const type = GGUF_VALUE_TYPES[id];
    if (type === undefined) {
      throw this.fail(
        `${what} at offset ${at} is ${id}, not a GGUF value type (0..${GGUF_VALUE_TYPES.length - 1})`,
      );
    }
    return type;
  }

  value(type: GgufValueType, what: string): GgufValue {
    const b = this.buf;
    const scalar = (n: number, read: (at: number) => GgufScalar): GgufScalar => {
      this.need(n, what);
      const v = read(this.pos);
      this.pos += n;
      return v;
    };
    switch (type) {
      case 'uint8':
        return scalar(1, (at) => b.readUInt8(at));
      case 'int8':
        return scalar(1, (at) => b.readInt8(at));
      case 'uint16':
        return scalar(2, (at) => b.readUInt16LE(at));
      case 'int16':
        return scalar(2, (at) => b.readInt16LE(at));
      case 'uint32':
        return scalar(4, (at) => b.readUInt32LE(at));
      case 'int32':
        return scalar(4, (at) => b.readInt32LE(at));
      case 'float32':
        return scalar(4, (at) => b.readFloatLE(at));
      case 'uint64':
        return scalar(8, (at) => b.readBigUInt64LE(at));
      case 'int64':
        return scalar(8, (at) => b.readBigInt64LE(at));
      case 'float64':
        return scalar(8, (at) => b.readDoubleLE(at));
      case 'bool': {
        const at = this.pos;
        const v = scalar(1, (p) => b.readUInt8(p));
        if (v !== 0 && v !== 1)
          throw this.fail(`${what} at offset ${at} is a bool of value ${v} (not 0 or 1)`);
        return v === 1;
      }
      case 'string':
        return this.string(what);
      case 'array': {
        const itemType = this.valueType(`the item type of ${what}`);
        const count = this.count(MIN_ITEM_BYTES[itemType], `the item count of ${what}`);
        const items = this.#items(itemType, count, what);
        return { itemType, items };
      }
    }
  }

  /** Array items; strings and plain numbers in tight loops (a vocabulary is 10^5 items). */
  #items(itemType: GgufValueType, count: number, what: string): GgufValue[] {
    const items = new Array<GgufValue>(count);
    if (itemType === 'string') {
      for (let i = 0; i < count; i += 1) items[i] = this.string(`item ${i} of ${what}`);
      return items;
    }
    const width = FIXED_WIDTH[itemType];
    if (width !== undefined) {
      this.need(width * count, what);
      for (let i = 0; i < count; i += 1) items[i] = this.value(itemType, what);
      return items;
    }
    for (let i = 0; i < count; i += 1) items[i] = this.value(itemType, `item ${i} of ${what}`);
    return items;
  }
}

/** Bytes of one item of each type when fixed; strings and arrays vary. */
const FIXED_WIDTH: Partial<Record<GgufValueType, number>> = {
  uint8: 1,
  int8: 1,
  uint16: 2,
  int16: 2,
  uint32: 4,
  int32: 4,
  float32: 4,
  bool: 1,
  uint64: 8,
  int64: 8,
  float64: 8,
};

/** The fewest bytes one item of each type takes (a string: its length; an array: type + count). */
const MIN_ITEM_BYTES: Record<GgufValueType, number> = {
  uint8: 1,
  int8: 1,
  uint16: 2,
  int16: 2,
  uint32: 4,
  int32: 4,
  float32: 4,
  bool: 1,
  string: 8,
  array: 12,
  uint64: 8,
  int64: 8,
  float64: 8,
};
