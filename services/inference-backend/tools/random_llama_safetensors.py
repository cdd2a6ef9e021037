#!/usr/bin/env python3
"""A Hugging Face Llama folder with random weights (config.json, model.safetensors) of a real
model's shape, for load benchmarks such as bench_cpu_load: the weights are random bytes with
their exponents held to magnitudes between 2^-7 and 2^-5 (so no inf or NaN), the norms ones. Python's
standard library only; a line per finished tenth shows the progress.
    python3 tools/random_llama_safetensors.py OUT_DIR [--shape llama-3.2-1b|llama-3-8b]
        [--layers N] [--dtype bf16|f16|f32]
llama-3.2-1b: 16 layers, hidden 2048, 128,256 tokens, tied embeddings (2.47 GB in bf16).
"""
import argparse
import json
import os
import struct
import sys

SHAPES = {
    # layers, hidden, intermediate, heads, kv heads, vocab, tied
    "llama-3.2-1b": (16, 2048, 8192, 32, 8, 128256, True),
    "llama-3-8b": (32, 4096, 14336, 32, 8, 128256, False),
}
DTYPES = {"bf16": ("BF16", 2), "f16": ("F16", 2), "f32": ("F32", 4)}
ONE = {"bf16": b"\x80\x3f", "f16": b"\x00\x3c", "f32": struct.pack("<f", 1.0)}


def exponent_table(dtype):
    """The high byte of each little-endian value (sign, then exponent bits), the sign kept."""
    # bf16 and f32: 0x3C is exponent 120 or 121 (the next bit is random): 2^-7 .. 2^-5; f16: 0x24
    # and 0x25 are exponent 9, 2^-6 .. 2^-5.
    top = {"bf16": 0x3C, "f32": 0x3C, "f16": 0x24}[dtype]
    return bytes((b & 0x80) | top | (b & 0x01 if dtype == "f16" else 0) for b in range(256))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers than the shape's (0: all)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    args = ap.parse_args()
    layers, hidden, inter, heads, kv_heads, vocab, tied = SHAPES[args.shape]
    if args.layers < 0 or args.layers > layers:
        sys.exit(f"--layers must be 0..{layers}")
    layers = args.layers or layers
    head_dim = hidden // heads
    os.makedirs(args.out, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": tied, "bos_token_id": 128000,
        "eos_token_id": 128001, "hidden_act": "silu",
        "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[args.dtype],
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    tensors = [("model.embed_tokens.weight", [vocab, hidden])]
    for layer in range(layers):
        p = f"model.layers.{layer}."
        tensors += [
            (p + "input_layernorm.weight", [hidden]), (p + "post_attention_layernorm.weight", [hidden]),
            (p + "self_attn.q_proj.weight", [heads * head_dim, hidden]),
            (p + "self_attn.k_proj.weight", [kv_heads * head_dim, hidden]),
            (p + "self_attn.v_proj.weight", [kv_heads * head_dim, hidden]),
            (p + "self_attn.o_proj.weight", [hidden, heads * head_dim]),
            (p + "mlp.gate_proj.weight", [inter, hidden]), (p + "mlp.up_proj.weight", [inter, hidden]),
            (p + "mlp.down_proj.weight", [hidden, inter]),
        ]
    tensors.append(("model.norm.weight", [hidden]))
    if not tied:
        tensors.append(("lm_head.weight", [vocab, hidden]))
    name, size = DTYPES[args.dtype]
    header, offset = {}, 0
    for tensor, shape in tensors:
        count = 1
        for d in shape:
            count *= d
        header[tensor] = {"dtype": name, "shape": shape, "data_offsets": [offset, offset + size * count]}
        offset += size * count
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    table = exponent_table(args.dtype)
    path = os.path.join(args.out, "model.safetensors")
    written, tenth = 0, 1
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for tensor, shape in tensors:
            count = 1
            for d in shape:
                count *= d
            if len(shape) == 1:
                f.write(ONE[args.dtype] * count)
            else:
                left = count
                while left:
                    n = min(left, 1 << 24)
                    buf = bytearray(os.urandom(size * n))
                    buf[size - 1::size] = bytes(buf[size - 1::size]).translate(table)
                    f.write(buf)
                    left -= n
            written += size * count
            while written * 10 >= offset * tenth and tenth <= 10:
                print(f"{path}: {tenth * 10}% of {offset / 1e9:.2f} GB", flush=True)
                tenth += 1
    print(f"wrote {args.out}: {args.shape}, {layers} layers, {args.dtype}, {offset / 1e9:.2f} GB of tensors")


if __name__ == "__main__":
    main()
