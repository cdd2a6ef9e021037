// Builds GGUF files byte by byte for tests, from the format's description (ggml docs/gguf.md):
// little-endian; header = magic "GGUF", u32 version, u64 tensor count, u64 key/value count; a key
// is a u64-length string, then a u32 value type and the value; an array is a u32 item type, a u64
// count and the items; a tensor info is its name, u32 n_dims, u64 dims, u32 ggml type, u64 offset;
// the tensor data starts at the next multiple of general.alignment (32 by default).
//
// The type ids are written out here rather than taken from src/model/gguf.ts, so that a wrong
// table there fails the tests instead of agreeing with itself.

/** GGUF value type ids (gguf.md, "gguf_metadata_value_type"). */
export const T = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const;
export type TypeName = keyof typeof T;

/** An array value: its item type and items (nested arrays are { itemType, items } again). */
export interface ArrayValue {
  itemType: TypeName;
  items: unknown[];
}

export type Kv = [key: string, type: TypeName, value: unknown];

export interface TensorSpec {
  name: string;
  dims: number[];
  /** ggml type id (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, ...). */
  type: number;
  /** Bytes of data the tensor takes (written as zeros). */
  bytes: number;
}

export class GgufWriter {
  readonly #parts: Buffer[] = [];
  #length = 0;

  get length(): number {
    return this.#length;
  }

  raw(bytes: Uint8Array): this {
    this.#parts.push(Buffer.from(bytes));
    this.#length += bytes.length;
    return this;
  }

  #fixed(n: number, write: (b: Buffer) => void): this {
    const b = Buffer.alloc(n);
    write(b);
    return this.raw(b);
  }

  u8 = (v: number) => this.#fixed(1, (b) => b.writeUInt8(v));
  i8 = (v: number) => this.#fixed(1, (b) => b.writeInt8(v));
  u16 = (v: number) => this.#fixed(2, (b) => b.writeUInt16LE(v));
  i16 = (v: number) => this.#fixed(2, (b) => b.writeInt16LE(v));
  u32 = (v: number) => this.#fixed(4, (b) => b.writeUInt32LE(v));
  i32 = (v: number) => this.#fixed(4, (b) => b.writeInt32LE(v));
  f32 = (v: number) => this.#fixed(4, (b) => b.writeFloatLE(v));
  f64 = (v: number) => this.#fixed(8, (b) => b.writeDoubleLE(v));
  u64 = (v: number | bigint) => this.#fixed(8, (b) => b.writeBigUInt64LE(BigInt(v)));
  i64 = (v: number | bigint) => this.#fixed(8, (b) => b.writeBigInt64LE(BigInt(v)));

  string(s: string): this {
    const bytes = Buffer.from(s, 'utf8');
    return this.u64(bytes.length).raw(bytes);
  }

  header(options: { tensors: number; kvs: number; version?: number; magic?: string }): this {
    return this.raw(Buffer.from(options.magic ?? 'GGUF', 'latin1'))
      .u32(options.version ?? 3)
      .u64(options.tensors)
      .u64(options.kvs);
  }

  value(type: TypeName, v: unknown): this {
    switch (type) {
      case 'uint8':
        return this.u8(v as number);
      case 'int8':
        return this.i8(v as number);
      case 'uint16':
        return this.u16(v as number);
      case 'int16':
        return this.i16(v as number);
      case 'uint32':
        return this.u32(v as number);
      case 'int32':
        return this.i32(v as number);
      case 'float32':
        return this.f32(v as number);
      case 'float64':
        return this.f64(v as number);
      case 'uint64':
        return this.u64(v as bigint);
      case 'int64':
        return this.i64(v as bigint);
      case 'bool':
        return this.u8(v ? 1 : 0);
      case 'string':
        return this.string(v as string);
      case 'array': {
        const { itemType, items } = v as ArrayValue;
        this.u32(T[itemType]).u64(items.length);
        for (const item of items) this.value(itemType, item);
        return this;
      }
    }
  }

  kv(key: string, type: TypeName, value: unknown): this {
    return this.string(key).u32(T[type]).value(type, value);
  }

  tensorInfo(name: string, dims: number[], type: number, offset: number): this {
    this.string(name).u32(dims.length);
    for (const d of dims) this.u64(d);
    return this.u32(type).u64(offset);
  }

  /** Zero bytes up to the next multiple of `alignment`. */
  align(alignment: number): this {
    const pad = (alignment - (this.#length % alignment)) % alignment;
    return this.raw(Buffer.alloc(pad));
  }

  bytes(): Buffer {
    return Buffer.concat(this.#parts);
  }
}

/** A whole, valid GGUF file: the key/values, the tensor infos, then the (zero) tensor data, aligned. */
export function ggufBytes(
  kvs: Kv[],
  tensors: TensorSpec[] = [],
  options: { alignment?: number } = {},
): Buffer {
  const alignment = options.alignment ?? 32;
  const w = new GgufWriter().header({ tensors: tensors.length, kvs: kvs.length });
  for (const [key, type, value] of kvs) w.kv(key, type, value);
  let offset = 0;
  for (const t of tensors) {
    w.tensorInfo(t.name, t.dims, t.type, offset);
    offset += Math.ceil(t.bytes / alignment) * alignment;
  }
  w.align(alignment);
  for (const t of tensors) w.raw(Buffer.alloc(Math.ceil(t.bytes / alignment) * alignment));
  return w.bytes();
}

export const strings = (items: string[]): ArrayValue => ({ itemType: 'string', items });
export const int32s = (items: number[]): ArrayValue => ({ itemType: 'int32', items });
export const float32s = (items: number[]): ArrayValue => ({ itemType: 'float32', items });

/** GPT-2's byte -> printable character table (what byte-level BPE vocabularies are written in). */
export function byteLevelChars(): string[] {
  const printable = (b: number) =>
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const chars: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b += 1) chars.push(String.fromCodePoint(printable(b) ? b : next++));
  return chars;
}

/** `text` as a byte-level BPE vocabulary writes it: each UTF-8 byte as its printable character. */
export function byteLevel(text: string): string {
  const chars = byteLevelChars();
  return Array.from(Buffer.from(text, 'utf8'), (b) => chars[b]).join('');
}
