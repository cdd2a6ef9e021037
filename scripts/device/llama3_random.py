#!/usr/bin/env python3
"""A Llama-3-8B-shaped model with random weights, and transformers' logits for it, for
check_cuda_hf_logits (the CUDA backend against Hugging Face on the same GPU and weights).

Writes into OUT: the model as a Hugging Face directory (config.json, bf16 safetensors shards),
prompts.bin (int32: count, then per prompt its length and token ids), logits.bin (float32: per
prompt, the last position's logits from transformers in bf16), logits_fp32.bin (the same from
transformers in fp32 on the same weights, the bf16 ones upcast: the reference), reference.json
(transformers' own bf16 error against fp32, per prompt) and, last, manifest.txt ("key KEY",
then "SIZE NAME" per file), which gpu-plan.sh checks before it reuses the directory. Runs on the
GPU machine (gpu-plan.sh's llama3 step):
    python3 scripts/device/llama3_random.py /tmp/llama3-random [--layers 32] [--seed 0] [--key K]
"""
import argparse
import json
import os
import struct
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

# Lengths that cross KV-block (16) and tile (32, 64) boundaries, up to a 1,024-token prompt.
PROMPT_LENGTHS = [1, 17, 64, 100, 255, 256, 513, 1024]


def last_logits(model, prompts):
    rows = []
    with torch.no_grad():
        for p in prompts:
            rows.append(model(p.unsqueeze(0).cuda()).logits[0, -1].float().cpu())
    return rows


def write_rows(path, rows):
    with open(path, "wb") as f:
        for r in rows:
            f.write(r.numpy().astype("<f4").tobytes())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--key", default="", help="written into manifest.txt, for the cache check")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)

    config = LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=args.layers,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_theta=500000.0, bos_token_id=128000, eos_token_id=128001, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
    )
    started = time.time()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)  # transformers' own init: N(0, 0.02) matrices, unit norms
    torch.set_default_dtype(torch.float32)
    model.eval()
    print(f"random weights on the GPU in {time.time() - started:.1f} s", flush=True)

    started = time.time()
    model.save_pretrained(args.out, safe_serialization=True)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out) if f.endswith(".safetensors"))
    print(f"wrote {size / 1e9:.2f} GB of safetensors in {time.time() - started:.1f} s", flush=True)

    generator = torch.Generator().manual_seed(args.seed + 1)
    prompts = [torch.randint(0, config.vocab_size, (n,), generator=generator) for n in PROMPT_LENGTHS]
    with open(os.path.join(args.out, "prompts.bin"), "wb") as f:
        f.write(struct.pack("<i", len(prompts)))
        for p in prompts:
            f.write(struct.pack("<i", len(p)))
            f.write(p.to(torch.int32).numpy().tobytes())

    # transformers in bf16 keeps its residual stream in bf16; the same weights upcast to fp32
    # (no TF32) give the reference both bf16 runs are judged against.
    bf16 = last_logits(model, prompts)
    write_rows(os.path.join(args.out, "logits.bin"), bf16)
    torch.set_float32_matmul_precision("highest")
    model = model.float()
    fp32 = last_logits(model, prompts)
    write_rows(os.path.join(args.out, "logits_fp32.bin"), fp32)
    reference = []
    for n, b, f in zip(PROMPT_LENGTHS, bf16, fp32):
        b, f = b.double(), f.double()
        row = {"tokens": n, "rel_l2": float((b - f).norm() / f.norm()), "max_abs": float((b - f).abs().max()),
               "top1_agrees": bool(b.argmax() == f.argmax())}
        reference.append(row)
        print(f"prompt of {n:4d} tokens: transformers bf16 vs fp32 rel_l2 {row['rel_l2']:.3e}, "
              f"max_abs {row['max_abs']:.3e}, top-1 {'agrees' if row['top1_agrees'] else 'differs'}", flush=True)
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump({"layers": args.layers, "seed": args.seed, "bf16_vs_fp32": reference}, f)
    print(f"transformers' bf16 and fp32 logits for {len(prompts)} prompts ({PROMPT_LENGTHS}) written", flush=True)

    # Last: the manifest, so a directory cut off before this point is never taken as complete.
    names = sorted(f for f in os.listdir(args.out) if f != "manifest.txt")
    with open(os.path.join(args.out, "manifest.txt.part"), "w") as f:
        f.write(f"key {args.key}\n")
        for name in names:
            f.write(f"{os.path.getsize(os.path.join(args.out, name))} {name}\n")
    os.replace(os.path.join(args.out, "manifest.txt.part"), os.path.join(args.out, "manifest.txt"))


if __name__ == "__main__":
    main()
