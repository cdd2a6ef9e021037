#!/usr/bin/env python3
"""transformers' generate() on the bench_cuda_e2e workload, for its comparison: N prompts of P
random tokens, O new tokens each (greedy, no early stop), in static batches of B on the GPU.
Writes {"seconds", "output_tokens", "batch", ...} as JSON.
    python3 scripts/device/hf_generate.py MODEL_DIR OUT.json [--requests 256] [--prompt 1024]
                                          [--output 128] [--batch 64]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, vocab, (args.requests, args.prompt), generator=generator)
    mask = torch.ones(args.batch, args.prompt, dtype=torch.long)

    def run(batch):
        return model.generate(batch.cuda(), attention_mask=mask[: len(batch)].cuda(), max_new_tokens=args.output,
                              min_new_tokens=args.output, do_sample=False, pad_token_id=0)

    with torch.no_grad():
        run(prompts[: min(args.batch, 2)])  # load kernels outside the timing
        torch.cuda.synchronize()
        started = time.time()
        produced = 0
        for first in range(0, args.requests, args.batch):
            out = run(prompts[first:first + args.batch])
            produced += (out.shape[1] - args.prompt) * out.shape[0]
        torch.cuda.synchronize()
        seconds = time.time() - started
    result = {"seconds": seconds, "output_tokens": produced, "requests": args.requests, "prompt": args.prompt,
              "output": args.output, "batch": args.batch, "output_tokens_per_s": produced / seconds}
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(f"transformers generate: {produced} tokens in {seconds:.1f} s ({produced / seconds:.0f} tok/s), "
          f"batches of {args.batch}", flush=True)


if __name__ == "__main__":
    main()
