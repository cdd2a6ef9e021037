"""Hugging Face transformers on CPU: the reference side of bench/engine-cpu.mjs.

Reads a JSON job from stdin ({model_dir, threads, decode: {batches, prompt, new_tokens},
prefill: {prompts}}) and prints one JSON line of results. Requires torch and
transformers (the orchestrator creates .toolchain/bench-venv with them when missing).
"""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
    job = json.load(sys.stdin)
    torch.set_num_threads(job["threads"])
    model = AutoModelForCausalLM.from_pretrained(job["model_dir"], torch_dtype=torch.float32)
    model.eval()
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "decode": [], "prefill": None}
    with torch.inference_mode():
        prompt = torch.tensor(job["prefill"]["prompts"])
        model(prompt)  # warm up kernels and allocator
        start = time.perf_counter()
        model(prompt)
        seconds = time.perf_counter() - start
        out["prefill"] = {"tokens": prompt.numel(), "seconds": seconds, "tokens_per_s": prompt.numel() / seconds}
        new_tokens = job["decode"]["new_tokens"]
        for batch in job["decode"]["batches"]:
            ids = torch.tensor([job["decode"]["prompt"]] * batch)
            attention = torch.ones_like(ids)
            kwargs = dict(attention_mask=attention, do_sample=False, pad_token_id=0, eos_token_id=None)
            model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kwargs)  # warm-up
            start = time.perf_counter()
            model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kwargs)
            first = time.perf_counter() - start
            start = time.perf_counter()
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
            total = time.perf_counter() - start
            # Decode rate: tokens after the first, over the time after the prefill + first token.
            decode_seconds = max(total - first, 1e-9)
            out["decode"].append(
                {"batch": batch, "tokens": batch * (new_tokens - 1), "seconds": decode_seconds,
                 "tokens_per_s": batch * (new_tokens - 1) / decode_seconds}
            )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
