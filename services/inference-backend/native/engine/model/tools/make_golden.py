#!/usr/bin/env python3
"""Writes the golden file that test_cpu_golden checks the CPU backend against.

The reference is Hugging Face transformers on the CPU in float32, an implementation independent
of ours. For each prompt (a short English story start, tokenized here with the model's own
tokenizer, BOS included, so the C++ test needs no tokenizer) it records:
  - prompt_ids:   the prompt's token ids
  - last_logits:  the logits at the last prompt position, before any generation
  - greedy_ids:   NEW_TOKENS greedy (argmax) tokens, decoded with the KV cache; EOS does not stop
                  the run, so every prompt has exactly NEW_TOKENS ids
  - min_greedy_margin: the smallest top-1 minus top-2 logit gap over the greedy steps, to show
                  how far the reference is from a tie that rounding could flip

Requirements (CPU only; no GPU needed):
    python3 -m venv /tmp/golden-venv
    /tmp/golden-venv/bin/pip install torch transformers
  (tested with torch 2.15.0 and transformers 5.23.0)

Usage:
    STRATA_MODELS_DIR=/path/to/shared/models /tmp/golden-venv/bin/python make_golden.py \
        [--model tinystories-656k] [--new-tokens 100] [--out ../tests/golden/tinystories-656k.json]

STRATA_MODELS_DIR (or --models-dir) is the folder holding the model directories; it is required.
"""

import argparse
import json
import os
import sys
from pathlib import Path

# Story starts whose greedy continuations stay far from ties (top-1 minus top-2 logit >= 0.009
# at every step), so agreement does not hinge on the last bits of float rounding.
PROMPTS = [
    "The cat sat on the mat and looked at the bird.",
    "The sun was shining and the birds were singing. Sam wanted to",
    "Max was a happy puppy. He loved to run and jump.",
    "Mia had a new toy car. It was red and shiny.",
    "Once upon a time, there was a little girl named Lily. She",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", default=os.environ.get("STRATA_MODELS_DIR"))
    parser.add_argument("--model", default="tinystories-656k")
    parser.add_argument("--new-tokens", type=int, default=100)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not args.models_dir:
        print("error: set STRATA_MODELS_DIR (or pass --models-dir) to the folder holding the model directories",
              file=sys.stderr)
        return 2
    model_dir = Path(args.models_dir) / args.model
    out = args.out or Path(__file__).resolve().parent.parent / "tests" / "golden" / f"{args.model}.json"

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # Eager attention: the textbook softmax(QK^T / sqrt(d)) V, in float32.
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()

    cases = []
    for text in PROMPTS:
        prompt_ids = tokenizer(text).input_ids
        input_ids = torch.tensor([prompt_ids])
        output = model(input_ids, use_cache=True)
        last_logits = output.logits[0, -1].clone()
        past = output.past_key_values
        logits = last_logits
        greedy_ids, margins = [], []
        for _ in range(args.new_tokens):
            top2 = torch.topk(logits, 2).values
            margins.append(float(top2[0] - top2[1]))
            next_id = int(torch.argmax(logits))
            greedy_ids.append(next_id)
            output = model(torch.tensor([[next_id]]), past_key_values=past, use_cache=True)
            past = output.past_key_values
            logits = output.logits[0, -1]
        cases.append({
            "text": text,
            "prompt_ids": prompt_ids,
            "greedy_ids": greedy_ids,
            "greedy_text": tokenizer.decode(greedy_ids),
            "min_greedy_margin": round(min(margins), 6),
            "last_logits": [float(f"{v:.8g}") for v in last_logits.tolist()],
        })
        print(f"{len(prompt_ids):3d} prompt tokens, min greedy margin {min(margins):.4f}: {text!r} ->"
              f" {tokenizer.decode(greedy_ids)[:60]!r}...")

    golden = {
        "model": args.model,
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, float32, CPU, eager attention",
        "generated_by": "services/inference-backend/native/engine/model/tools/make_golden.py",
        "new_tokens": args.new_tokens,
        "cases": cases,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    # One case field per line: diffs of a regenerated file stay readable.
    lines = ["{"]
    for key in ("model", "reference", "generated_by", "new_tokens"):
        lines.append(f"  {json.dumps(key)}: {json.dumps(golden[key])},")
    lines.append('  "cases": [')
    for i, case in enumerate(cases):
        fields = [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in case.items()]
        lines.append("   {\n" + ",\n".join(fields) + "\n   }" + ("," if i + 1 < len(cases) else ""))
    lines.append("  ]")
    lines.append("}")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
