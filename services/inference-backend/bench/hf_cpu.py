"""Hugging Face transformers on CPU: the reference side of bench/engine-cpu.mjs.

Reads a JSON job from stdin ({model_dir, threads, repeats, decode: {batches, prompt,
new_tokens}, prefill: {prompts}}) and prints one JSON line of results; each figure is the
median of `repeats` runs. Requires torch and transformers (the orchestrator creates .toolchain/bench-venv with them when missing).
"""
import json
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
    job = json.load(sys.stdin)
    torch.set_num_threads(job["threads"])
    repeats = job["repeats"]
    model = AutoModelForCausalLM.from_pretrained(job["model_dir"], torch_dtype=torch.float32)
    model.eval()
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "decode": [], "prefill": None}
    with torch.inference_mode():
        prompt = torch.tensor(job["prefill"]["prompts"])
        model(prompt)  # warm up kernels and allocator
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            model(prompt)
            runs.append(prompt.numel() / (time.perf_counter() - start))
        out["prefill"] = {"tokens": prompt.numel(), "tokens_per_s": statistics.median(runs), "runs_tokens_per_s": runs}
        new_tokens = job["decode"]["new_tokens"]
        for batch in job["decode"]["batches"]:
            ids = torch.tensor([job["decode"]["prompt"]] * batch)
            attention = torch.ones_like(ids)
            kwargs = dict(attention_mask=attention, do_sample=False, pad_token_id=0, eos_token_id=None)
            model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kwargs)  # warm-up
            tokens = batch * (new_tokens - 1)
            runs = []
            for _ in range(repeats):
                start = time.perf_counter()
                model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kwargs)
                first = time.perf_counter() - start
                start = time.perf_counter()
                model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
                total = time.perf_counter() - start
                # Decode rate: tokens after the first, over the time after the prefill + first token.
                runs.append(tokens / max(total - first, 1e-9))
            out["decode"].append(
                {"batch": batch, "tokens": tokens, "tokens_per_s": statistics.median(runs), "runs_tokens_per_s": runs}
            )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
