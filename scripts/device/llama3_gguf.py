#!/usr/bin/env python3
"""A Hugging Face Llama directory (safetensors in f32, bf16 or f16) written as a GGUF file with
every matrix quantized to Q4_0, Q4_1 or Q8_0 (ggml's reference rounding, as llama.cpp's
quantize does for these types), or in F16 or BF16 (rounded to nearest even, as llama.cpp's
converter writes them), and the norms in F32: for the CUDA backend's quantized path on the
GPU (gpu-plan.sh's gguf step): tinystories-656k for check_cuda_backend's quantized checks, then
the random Llama-3-8B-shaped model of llama3_random.py for bench_cuda_forward; and for the loads
of a float GGUF file (the load_f16 step, bench_cpu_load here).

q/k rows are written in llama.cpp's order (the engine's loader undoes it). Only the metadata the
engine reads is written: no tokenizer, and no rope scaling (the GGUF loader refuses Llama 3.1's
rope_freqs; a speed benchmark at 1k tokens is the same either way). numpy only; one worker
process per CPU quantizes tensors straight into the file, and a line per finished tenth shows
the progress.
    python3 scripts/device/llama3_gguf.py MODEL_DIR OUT.gguf [--type Q4_0|Q4_1|Q8_0|F16|BF16] [--workers N]
"""
import argparse
import json
import multiprocessing
import os
import struct
import sys
import time

import numpy as np

ALIGN = 32
GGML_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "BF16": 30}
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}  # per 32 values
FLOAT_BYTES = {"F32": 4, "F16": 2, "BF16": 2}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
CHUNK_VALUES = 1 << 24  # values a worker converts at a time (64 MB of fp32)


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    if len(parts) > 3 and parts[0] == "model" and parts[1] == "layers":
        rest = ".".join(parts[3:])
        if rest in LAYER_NAMES:
            return f"blk.{parts[2]}.{LAYER_NAMES[rest]}"
    raise SystemExit(f"{hf}: not a tensor of a Llama model this script converts (biases are not supported)")


def safetensors_tensors(model_dir):
    """name -> (file, absolute data offset, dtype, shape) for every tensor of every shard."""
    tensors = {}
    shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not shards:
        raise SystemExit(f"{model_dir}: no .safetensors files")
    for shard in shards:
        path = os.path.join(model_dir, shard)
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in ("F32", "BF16", "F16"):
                raise SystemExit(f"{name} in {path} is {info['dtype']}; this script reads F32, BF16 and F16")
            tensors[name] = (path, 8 + length + info["data_offsets"][0], info["dtype"], info["shape"])
    return tensors


def read_rows(spec, first, count):
    """Rows [first, first + count) of a 2-D tensor (or the whole 1-D one) as float32."""
    path, offset, dtype, shape = spec
    cols = shape[-1]
    itemsize = 4 if dtype == "F32" else 2
    raw = np.fromfile(path, dtype="<u2" if itemsize == 2 else "<f4", count=count * cols,
                      offset=offset + first * cols * itemsize)
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32).reshape(count, cols)
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float32).reshape(count, cols)
    return raw.reshape(count, cols)


def round_away(v):
    """roundf: halves away from zero, as ggml rounds."""
    return np.trunc(v + np.copysign(np.float32(0.5), v))


def inverse(d):
    out = np.zeros_like(d)
    np.divide(np.float32(1.0), d, out=out, where=d != 0)
    return out


def quantize(x, qtype):
    """(rows, cols) float32 -> (rows * cols / 32, block bytes) uint8 in ggml's block layout."""
    b = x.reshape(-1, 32)
    if qtype == "Q8_0":
        d = np.abs(b).max(axis=1) / np.float32(127)
        q = round_away(b * inverse(d)[:, None]).astype(np.int8)
        return np.concatenate([d.astype("<f2").view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1)
    if qtype == "Q4_0":
        signed_max = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]
        d = signed_max / np.float32(-8)
        q = np.minimum(15, (b * inverse(d)[:, None] + np.float32(8.5)).astype(np.int32)).astype(np.uint8)
        qs = q[:, :16] | (q[:, 16:] << 4)
        return np.concatenate([d.astype("<f2").view(np.uint8).reshape(-1, 2), qs], axis=1)
    lo, hi = b.min(axis=1), b.max(axis=1)
    d = (hi - lo) / np.float32(15)
    q = np.minimum(15, ((b - lo[:, None]) * inverse(d)[:, None] + np.float32(0.5)).astype(np.int32)).astype(np.uint8)
    qs = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([d.astype("<f2").view(np.uint8).reshape(-1, 2),
                           lo.astype("<f2").view(np.uint8).reshape(-1, 2), qs], axis=1)


def to_bf16(x):
    """float32 -> bf16 bits, rounded to nearest even (no NaN in these weights)."""
    bits = x.astype("<f4").view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype("<u2")


def encode(x, qtype):
    if qtype in BLOCK_BYTES:
        return quantize(x, qtype)
    if qtype == "BF16":
        return to_bf16(x)
    return x.astype("<f2" if qtype == "F16" else "<f4")


def convert(task):
    """One tensor into the output file at its offset; returns its name and bytes written."""
    out_path, at, spec, qtype, heads = task
    shape = spec[3]
    rows = shape[0] if len(shape) == 2 else 1
    cols = shape[-1]
    written = 0
    fd = os.open(out_path, os.O_WRONLY)
    try:
        # A q/k matrix is permuted per head, so a chunk is whole heads; otherwise whole rows.
        unit = rows // heads if heads else 1
        step = max(unit, (CHUNK_VALUES // cols) // unit * unit)
        for first in range(0, rows, step):
            count = min(step, rows - first)
            x = read_rows(spec, first, count)
            if heads:  # Hugging Face's (2, head_dim / 2) halves -> llama.cpp's interleaved pairs
                x = x.reshape(count // unit, 2, unit // 2, cols).transpose(0, 2, 1, 3).reshape(count, cols)
            data = encode(x, qtype).tobytes()
            os.pwrite(fd, data, at + written)
            written += len(data)
    finally:
        os.close(fd)
    return written


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--type", default="Q4_0", choices=sorted(BLOCK_BYTES) + ["F16", "BF16"])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    started = time.time()
    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise SystemExit("biases are not supported by this script")
    if config.get("rope_scaling"):
        print(f"note: rope_scaling {config['rope_scaling'].get('rope_type', '?')} is not written "
              "(the GGUF loader takes no rope scaling)", flush=True)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or hidden // heads
    tensors = safetensors_tensors(args.model_dir)
    if config.get("tie_word_embeddings") and "model.embed_tokens.weight" not in tensors:
        tensors["model.embed_tokens.weight"] = tensors.pop("lm_head.weight")
    if config.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)

    kv = []

    def meta(key, kind, value):
        if kind == "u32":
            kv.append(gguf_string(key) + struct.pack("<I", 4) + struct.pack("<I", int(value)))
        elif kind == "f32":
            kv.append(gguf_string(key) + struct.pack("<I", 6) + struct.pack("<f", float(value)))
        else:
            kv.append(gguf_string(key) + struct.pack("<I", 8) + gguf_string(value))

    meta("general.architecture", "str", "llama")
    meta("general.name", "str", os.path.basename(os.path.normpath(args.model_dir)) + "-" + args.type)
    meta("llama.block_count", "u32", config["num_hidden_layers"])
    meta("llama.context_length", "u32", config["max_position_embeddings"])
    meta("llama.embedding_length", "u32", hidden)
    meta("llama.feed_forward_length", "u32", config["intermediate_size"])
    meta("llama.attention.head_count", "u32", heads)
    meta("llama.attention.head_count_kv", "u32", kv_heads)
    if head_dim != hidden // heads:
        meta("llama.attention.key_length", "u32", head_dim)
        meta("llama.attention.value_length", "u32", head_dim)
    meta("llama.attention.layer_norm_rms_epsilon", "f32", config["rms_norm_eps"])
    meta("llama.rope.freq_base", "f32", config.get("rope_theta", 10000.0))
    meta("llama.vocab_size", "u32", config["vocab_size"])
    if config.get("bos_token_id") is not None:
        meta("tokenizer.ggml.bos_token_id", "u32", config["bos_token_id"])
    eos = config.get("eos_token_id")
    if eos is not None:
        meta("tokenizer.ggml.eos_token_id", "u32", eos[0] if isinstance(eos, list) else eos)

    # Tensor infos and their offsets in the data section (each aligned to 32 bytes).
    infos, tasks, offset = [], [], 0
    for name in sorted(tensors, key=lambda n: (n.count("."), n)):
        spec = tensors[name]
        shape = spec[3]
        matrix = len(shape) == 2
        qtype = args.type if matrix and (shape[-1] % 32 == 0 or args.type in FLOAT_BYTES) else "F32"
        count = shape[0] * shape[-1] if matrix else shape[0]
        nbytes = count // 32 * BLOCK_BYTES[qtype] if qtype in BLOCK_BYTES else count * FLOAT_BYTES[qtype]
        dims = [shape[-1], shape[0]] if matrix else [shape[0]]
        infos.append(gguf_string(gguf_name(name)) + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", GGML_TYPES[qtype], offset))
        permuted = ".q_proj." in name or ".k_proj." in name
        n_heads = (heads if ".q_proj." in name else kv_heads) if permuted else 0
        tasks.append([args.out, offset, spec, qtype, n_heads])
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
    header = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kv)) + b"".join(kv) + b"".join(infos)
    data_start = (len(header) + ALIGN - 1) // ALIGN * ALIGN
    with open(args.out, "wb") as f:
        f.write(header + b"\0" * (data_start - len(header)))
        f.truncate(data_start + offset)
    for task in tasks:
        task[1] += data_start

    total, done, shown = offset, 0, 0
    print(f"{len(tasks)} tensors, {total / 1e9:.2f} GB of {args.type} and F32, {args.workers} workers", flush=True)
    with multiprocessing.Pool(args.workers) as pool:
        for written in pool.imap_unordered(convert, [tuple(t) for t in tasks]):
            done += written
            while done * 10 >= (shown + 1) * total and shown < 10:
                shown += 1
                print(f"  {shown * 10:3d}% ({done / 1e9:.2f} GB) after {time.time() - started:.1f} s", flush=True)
    print(f"wrote {args.out}: {(data_start + total) / 1e9:.2f} GB in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
