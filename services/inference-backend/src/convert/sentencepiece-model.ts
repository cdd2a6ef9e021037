// Reads a SentencePiece model file (a serialized sentencepiece.ModelProto, protobuf) without a
// protobuf library: only the fields a Hugging Face tokenizer.json needs are decoded; the rest are
// skipped by wire type. Field numbers and proto2 defaults are those of sentencepiece_model.proto.

import { ModelError } from '../model/errors.js';

export const PieceType = {
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;
export type PieceType = (typeof PieceType)[keyof typeof PieceType];

export const ModelType = { UNIGRAM: 1, BPE: 2, WORD: 3, CHAR: 4 } as const;

export interface SentencePiece {
  piece: string;
  score: number;
  type: PieceType;
}

export interface SentencePieceModel {
  /** Index = token id. */
  pieces: SentencePiece[];
  trainer: {
    modelType: number;
    byteFallback: boolean;
    treatWhitespaceAsSuffix: boolean;
    /** -1 = none. */
    unkId: number;
    bosId: number;
    eosId: number;
    padId: number;
  };
  normalizer: {
    name: string;
    /** Bytes of a compiled normalization map; empty for the 'identity' rule. */
    precompiledCharsmapBytes: number;
    addDummyPrefix: boolean;
    removeExtraWhitespaces: boolean;
    escapeWhitespaces: boolean;
  };
}

const WIRE_VARINT = 0;
const WIRE_I64 = 1;
const WIRE_LEN = 2;
const WIRE_I32 = 5;

/** Throws ModelError STRATA_CONVERT, naming `file`, when `bytes` is not a SentencePiece model. */
export function parseSentencePieceModel(bytes: Uint8Array, file = 'SentencePiece model'): SentencePieceModel {
  try {
    return parseModel(new Reader(bytes, 0, bytes.length));
  } catch (err) {
    if (err instanceof ModelError) throw err;
    throw new ModelError(
      'STRATA_CONVERT',
      `${file} is not a SentencePiece model: ${(err as Error).message}`,
      {
        file,
        cause: err,
      },
    );
  }
}

function parseModel(r: Reader): SentencePieceModel {
  const model: SentencePieceModel = {
    pieces: [],
    trainer: {
      modelType: ModelType.UNIGRAM,
      byteFallback: false,
      treatWhitespaceAsSuffix: false,
      unkId: 0,
      bosId: 1,
      eosId: 2,
      padId: -1,
    },
    normalizer: {
      name: '',
      precompiledCharsmapBytes: 0,
      addDummyPrefix: true,
      removeExtraWhitespaces: true,
      escapeWhitespaces: true,
    },
  };
  while (!r.done()) {
    const [field, wire] = r.tag();
    if (field === 1 && wire === WIRE_LEN) model.pieces.push(parsePiece(r.sub()));
    else if (field === 2 && wire === WIRE_LEN) parseTrainer(r.sub(), model.trainer);
    else if (field === 3 && wire === WIRE_LEN) parseNormalizer(r.sub(), model.normalizer);
    else r.skip(wire);
  }
  if (model.pieces.length === 0) throw new Error('it has no pieces (field 1)');
  return model;
}

function parsePiece(r: Reader): SentencePiece {
  const out: SentencePiece = { piece: '', score: 0, type: PieceType.NORMAL };
  while (!r.done()) {
    const [field, wire] = r.tag();
    if (field === 1 && wire === WIRE_LEN) out.piece = r.string();
    else if (field === 2 && wire === WIRE_I32) out.score = r.float();
    else if (field === 3 && wire === WIRE_VARINT) out.type = pieceType(r.int());
    else r.skip(wire);
  }
  return out;
}

function pieceType(value: number): PieceType {
  if (value < PieceType.NORMAL || value > PieceType.BYTE) throw new Error(`unknown piece type ${value}`);
  return value as PieceType;
}

function parseTrainer(r: Reader, t: SentencePieceModel['trainer']): void {
  while (!r.done()) {
    const [field, wire] = r.tag();
    if (wire !== WIRE_VARINT) {
      r.skip(wire);
      continue;
    }
    const value = r.int();
    if (field === 3) t.modelType = value;
    else if (field === 24) t.treatWhitespaceAsSuffix = value !== 0;
    else if (field === 35) t.byteFallback = value !== 0;
    else if (field === 40) t.unkId = value;
    else if (field === 41) t.bosId = value;
    else if (field === 42) t.eosId = value;
    else if (field === 43) t.padId = value;
  }
}

function parseNormalizer(r: Reader, n: SentencePieceModel['normalizer']): void {
  while (!r.done()) {
    const [field, wire] = r.tag();
    if (field === 1 && wire === WIRE_LEN) n.name = r.string();
    else if (field === 2 && wire === WIRE_LEN) n.precompiledCharsmapBytes = r.sub().length;
    else if (field === 3 && wire === WIRE_VARINT) n.addDummyPrefix = r.int() !== 0;
    else if (field === 4 && wire === WIRE_VARINT) n.removeExtraWhitespaces = r.int() !== 0;
    else if (field === 5 && wire === WIRE_VARINT) n.escapeWhitespaces = r.int() !== 0;
    else r.skip(wire);
  }
}

/** A cursor over bytes[pos, end): one protobuf message. */
class Reader {
  readonly #bytes: Uint8Array;
  readonly #view: DataView;
  #pos: number;
  readonly #end: number;

  constructor(bytes: Uint8Array, pos: number, end: number) {
    this.#bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.#pos = pos;
    this.#end = end;
  }

  get length(): number {
    return this.#end - this.#pos;
  }

  done(): boolean {
    return this.#pos >= this.#end;
  }

  tag(): [field: number, wire: number] {
    const key = this.varint();
    return [Number(key >> 3n), Number(key & 7n)];
  }

  /** int32/int64/enum/bool: negative values arrive as 10-byte two's complement varints. */
  int(): number {
    return Number(BigInt.asIntN(64, this.varint()));
  }

  float(): number {
    this.#need(4);
    const value = this.#view.getFloat32(this.#pos, true);
    this.#pos += 4;
    return value;
  }

  string(): string {
    const sub = this.sub();
    return new TextDecoder('utf-8', { fatal: true }).decode(this.#bytes.subarray(sub.#pos, sub.#end));
  }

  /** The length-delimited field at the cursor, as its own reader; the cursor moves past it. */
  sub(): Reader {
    const length = Number(this.varint());
    this.#need(length);
    const sub = new Reader(this.#bytes, this.#pos, this.#pos + length);
    this.#pos += length;
    return sub;
  }

  skip(wire: number): void {
    if (wire === WIRE_VARINT) this.varint();
    else if (wire === WIRE_I64) this.#advance(8);
    else if (wire === WIRE_LEN) this.sub();
    else if (wire === WIRE_I32) this.#advance(4);
    else throw new Error(`unsupported wire type ${wire} at byte ${this.#pos}`);
  }

  varint(): bigint {
    let value = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      this.#need(1);
      const byte = this.#bytes[this.#pos] ?? 0;
      this.#pos += 1;
      value |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return value;
    }
    throw new Error(`varint longer than 10 bytes at byte ${this.#pos}`);
  }

  #advance(n: number): void {
    this.#need(n);
    this.#pos += n;
  }

  #need(n: number): void {
    if (this.#pos + n > this.#end) throw new Error(`truncated at byte ${this.#pos} (needs ${n} more)`);
  }
}
