#!/usr/bin/env python3
"""Golden outputs for the converted stories260K model, from two independent references.

Checks that src/convert/llama2c.ts converted the llama2.c checkpoint right, and writes
test/golden/stories260k.json (and test/golden/llama2-tokenizer.json) for tests that run without Python:

  1. Hugging Face transformers (CPU, float32, eager attention) runs the converted directory;
  2. a numpy port of llama2.c's own forward pass (run.c: interleaved RoPE) reads stories260K.bin
     directly, in float64;
  the two must pick the same greedy token at every step (5 prompts x 60 tokens, EOS ignored) and
  agree on last-prompt-position logits within 1e-4 (max abs). The golden file stores transformers'
  token ids and logits.
  3. the converted tokenizer.json (through the `tokenizers` library and through transformers'
     AutoTokenizer) encodes a set of sentences exactly as SentencePiece does with tok512.model;
     the same for Llama 2's tokenizer.model when --llama2-converted is given.

Requirements: Python 3.10+, and from PyPI: torch (the CPU build is enough), transformers (tested
with 5.23), tokenizers, sentencepiece, numpy.
    python3 -m venv /tmp/venv-golden
    /tmp/venv-golden/bin/pip install torch transformers sentencepiece numpy

Run (from services/inference-backend, after `pnpm exec tsc -p tsconfig.build.json`):
    export STRATA_MODELS_DIR=/path/to/shared/models   # holds stories260K/ and llama2-tokenizer/
    node dist/convert/cli.js llama2c --checkpoint $STRATA_MODELS_DIR/stories260K/stories260K.bin \
        --tokenizer $STRATA_MODELS_DIR/stories260K/tok512.model --out /tmp/stories260K-hf
    node dist/convert/cli.js sentencepiece --model $STRATA_MODELS_DIR/llama2-tokenizer/tokenizer.model \
        --out /tmp/llama2-tokenizer-hf
    /tmp/venv-golden/bin/python tools/make_golden_llama2c.py --converted /tmp/stories260K-hf \
        --llama2-converted /tmp/llama2-tokenizer-hf
Exits non-zero, writing nothing, when any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import sys
from pathlib import Path

import numpy as np

PROMPTS = [
    "",
    "Once upon a time",
    "Lily and Tom went to the park",
    "The little dog",
    "One day, a girl named Sue found a big box.",
]
NEW_TOKENS = 60
LOGIT_TOLERANCE = 1e-4

# Sentences for the tokenizer comparison: plain English, punctuation and digits (tok512 splits
# digits), spaces SentencePiece normalizes (leading, trailing, doubled), newlines, and characters
# outside the vocabulary that must fall back to bytes.
SENTENCES = [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park with her dog, Max!",
    '"Can I have 3 apples?" asked Tom. Mom said: "Yes, 12 is too many."',
    "The sun was hot; the birds sang. It's a happy day...",
    "Hello  world   with    extra spaces",
    "  leading and trailing spaces  ",
    "line one\nline two\n\nline three",
    "tab\tseparated\ttext",
    "Zebra QUICK brown fox jumps over the lazy dog 0123456789",
    "café naïve résumé",
    "你好，世界",
    "emoji 😀 and 🎉 party",
    "a",
    " ",
    "",
]


def dump_json(value) -> str:
    """Indented JSON with lists of numbers kept on one line."""
    text = json.dumps(value, indent=1, ensure_ascii=False)
    return re.sub(r"\[[-0-9.e,\s]*\]", lambda m: re.sub(r"\s+", "", m.group(0)).replace(",", ", "), text) + "\n"


def read_llama2c(path: Path):
    """llama2.c legacy checkpoint: 7 x int32 header, then float32 weights in run.c's order."""
    raw = path.read_bytes()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // n_heads
    kv_dim = n_kv_heads * hs
    data = np.frombuffer(raw, dtype="<f4", offset=28).astype(np.float64)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        out = data[pos : pos + n].reshape(shape)
        pos += n
        return out

    w = {
        "emb": take(vocab, dim),
        "rms_att": take(n_layers, dim),
        "wq": take(n_layers, dim, dim),
        "wk": take(n_layers, kv_dim, dim),
        "wv": take(n_layers, kv_dim, dim),
        "wo": take(n_layers, dim, dim),
        "rms_ffn": take(n_layers, dim),
        "w1": take(n_layers, hidden, dim),
        "w2": take(n_layers, dim, hidden),
        "w3": take(n_layers, hidden, dim),
        "rms_final": take(dim),
    }
    take(seq_len, hs // 2)  # freq_cis_real
    take(seq_len, hs // 2)  # freq_cis_imag
    w["wcls"] = w["emb"] if shared else take(vocab, dim)
    assert pos == data.size, f"{path}: {data.size - pos} floats left over"
    cfg = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
               vocab=vocab, seq_len=seq_len)
    return cfg, w


class Llama2cNumpy:
    """run.c's forward(), one position at a time with a KV cache, in float64."""

    def __init__(self, cfg, w):
        self.c, self.w = cfg, w
        L, S = cfg["n_layers"], cfg["seq_len"]
        kv_dim = cfg["n_kv_heads"] * (cfg["dim"] // cfg["n_heads"])
        self.key_cache = np.zeros((L, S, kv_dim))
        self.value_cache = np.zeros((L, S, kv_dim))

    @staticmethod
    def rmsnorm(x, weight):
        ss = np.dot(x, x) / x.size + 1e-5
        return weight * (x / np.sqrt(ss))

    def forward(self, token: int, pos: int) -> np.ndarray:
        c, w = self.c, self.w
        dim, n_heads = c["dim"], c["n_heads"]
        hs = dim // n_heads
        kv_dim = c["n_kv_heads"] * hs
        kv_mul = n_heads // c["n_kv_heads"]
        x = w["emb"][token].copy()
        for l in range(c["n_layers"]):
            xb = self.rmsnorm(x, w["rms_att"][l])
            q = w["wq"][l] @ xb
            k = w["wk"][l] @ xb
            v = w["wv"][l] @ xb
            # RoPE as run.c: rotate each adjacent pair (i, i+1) by pos * 10000^(-(i % hs) / hs).
            for i in range(0, dim, 2):
                freq = 1.0 / (10000.0 ** ((i % hs) / hs))
                fcr, fci = np.cos(pos * freq), np.sin(pos * freq)
                for vec in (q, k) if i < kv_dim else (q,):
                    v0, v1 = vec[i], vec[i + 1]
                    vec[i] = v0 * fcr - v1 * fci
                    vec[i + 1] = v0 * fci + v1 * fcr
            self.key_cache[l, pos] = k
            self.value_cache[l, pos] = v
            out = np.zeros(dim)
            for h in range(n_heads):
                qh = q[h * hs : (h + 1) * hs]
                kvh = (h // kv_mul) * hs
                keys = self.key_cache[l, : pos + 1, kvh : kvh + hs]
                scores = keys @ qh / np.sqrt(hs)
                scores = np.exp(scores - scores.max())
                att = scores / scores.sum()
                out[h * hs : (h + 1) * hs] = att @ self.value_cache[l, : pos + 1, kvh : kvh + hs]
            x = x + w["wo"][l] @ out
            xb = self.rmsnorm(x, w["rms_ffn"][l])
            hb = w["w1"][l] @ xb
            hb2 = w["w3"][l] @ xb
            hb = hb * (1.0 / (1.0 + np.exp(-hb))) * hb2
            x = x + w["w2"][l] @ hb
        x = self.rmsnorm(x, w["rms_final"])
        return w["wcls"] @ x


def numpy_greedy(cfg, w, prompt_ids, n_new):
    """Returns (logits at the last prompt position, generated ids)."""
    model = Llama2cNumpy(cfg, w)
    logits = None
    for pos, tok in enumerate(prompt_ids):
        logits = model.forward(tok, pos)
    last_prompt_logits = logits.copy()
    out = []
    pos = len(prompt_ids)
    for _ in range(n_new):
        nxt = int(np.argmax(logits))
        out.append(nxt)
        logits = model.forward(nxt, pos)
        pos += 1
    return last_prompt_logits, out


def hf_greedy(model, torch, prompt_ids, n_new):
    """Full forward per step (the model is tiny), EOS ignored; returns (last prompt logits, ids, min top-2 margin)."""
    ids = list(prompt_ids)
    first = None
    margin = float("inf")
    with torch.no_grad():
        for step in range(n_new):
            logits = model(torch.tensor([ids])).logits[0, -1].to(torch.float64)
            if step == 0:
                first = logits.numpy().copy()
            top2 = torch.topk(logits, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            ids.append(int(torch.argmax(logits)))
    return first, ids[len(prompt_ids):], margin


def unpermute_qk(model, torch, cfg):
    """Puts q_proj/k_proj rows back in llama2.c's interleaved order (undoing the converter), in place."""
    hs = cfg["dim"] // cfg["n_heads"]
    # HF row r of a head is llama2.c row perm[r]: [0, 2, ..., hs-2, 1, 3, ..., hs-1].
    perm = torch.tensor([2 * r if r < hs // 2 else 2 * (r - hs // 2) + 1 for r in range(hs)])
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                w = proj.weight.view(-1, hs, proj.weight.shape[1])
                restored = torch.empty_like(w)
                restored[:, perm] = w
                proj.weight.copy_(restored.view_as(proj.weight))


def check_tokenizer(spm_path: Path, converted: Path, sentences, label: str):
    """Encodes with SentencePiece and with the converted tokenizer.json; returns [{text, ids}] (no BOS)."""
    import sentencepiece as spm
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    fast = Tokenizer.from_file(str(converted / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(str(converted))
    cases, failures = [], []
    for text in sentences:
        want = sp.encode(text)
        got_fast = fast.encode(text, add_special_tokens=False).ids
        got_auto = auto.encode(text, add_special_tokens=False)
        with_bos = auto.encode(text)
        if got_fast != want or got_auto != want or with_bos != [sp.bos_id()] + want:
            failures.append((text, want, got_fast, got_auto, with_bos))
        cases.append({"text": text, "ids": want})
    if failures:
        for f in failures:
            print(f"{label}: MISMATCH {f[0]!r}\n  sentencepiece {f[1]}\n  tokenizers    {f[2]}\n"
                  f"  AutoTokenizer {f[3]}\n  with BOS      {f[4]}", file=sys.stderr)
        raise SystemExit(f"{label}: converted tokenizer.json disagrees with SentencePiece")
    print(f"{label}: {len(cases)} sentences encode identically (sentencepiece == tokenizers == AutoTokenizer)")
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models-dir", default=os.environ.get("STRATA_MODELS_DIR"),
                    help="folder holding stories260K/ and llama2-tokenizer/ (default: $STRATA_MODELS_DIR)")
    ap.add_argument("--converted", required=True, type=Path, help="converter output for stories260K")
    ap.add_argument("--llama2-converted", type=Path, help="converter output for llama2-tokenizer/tokenizer.model")
    ap.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent.parent / "test" / "golden")
    args = ap.parse_args()
    if not args.models_dir:
        raise SystemExit("set STRATA_MODELS_DIR (or --models-dir) to the folder holding stories260K/")
    models = Path(args.models_dir)

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    cases = check_tokenizer(models / "stories260K" / "tok512.model", args.converted, SENTENCES, "tok512")
    llama2_cases = None
    if args.llama2_converted:
        llama2_cases = check_tokenizer(models / "llama2-tokenizer" / "tokenizer.model", args.llama2_converted,
                                       SENTENCES, "llama2")

    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(models / "stories260K" / "tok512.model"))
    cfg, w = read_llama2c(models / "stories260K" / "stories260K.bin")
    model = AutoModelForCausalLM.from_pretrained(str(args.converted), dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()

    prompts_out = []
    worst_logit = 0.0
    worst_margin = float("inf")
    for text in PROMPTS:
        ids = [sp.bos_id()] + sp.encode(text)
        np_logits, np_ids = numpy_greedy(cfg, w, ids, NEW_TOKENS)
        hf_logits, hf_ids, margin = hf_greedy(model, torch, ids, NEW_TOKENS)
        diff = float(np.max(np.abs(np_logits - hf_logits)))
        worst_logit = max(worst_logit, diff)
        worst_margin = min(worst_margin, margin)
        print(f"prompt {text!r}: {len(ids)} ids, max |logit numpy - HF| {diff:.2e}, "
              f"min top-2 margin {margin:.3f}, tokens {'agree' if np_ids == hf_ids else 'DIFFER'}")
        print(f"  -> {sp.decode(hf_ids)!r}")
        if np_ids != hf_ids:
            first = next(i for i, (a, b) in enumerate(zip(np_ids, hf_ids)) if a != b)
            raise SystemExit(f"greedy tokens differ at step {first}: numpy {np_ids} vs HF {hf_ids}")
        if diff > LOGIT_TOLERANCE:
            raise SystemExit(f"logits differ by {diff} > {LOGIT_TOLERANCE}")
        prompts_out.append({
            "text": text,
            "prompt_ids": ids,
            "generated_ids": hf_ids,
            "generated_text": sp.decode(hf_ids),
            # float32 values; repr of the float64 copy is exact.
            "last_prompt_logits": [float(x) for x in hf_logits.astype(np.float32)],
        })

    # Negative control: the comparison must be able to fail. With q/k rows left in llama2.c's order,
    # transformers has to disagree with the numpy reference.
    unpermute_qk(model, torch, cfg)
    ids = prompts_out[1]["prompt_ids"]
    _, wrong_ids, _ = hf_greedy(model, torch, ids, NEW_TOKENS)
    wrong_logits, _, _ = hf_greedy(model, torch, ids, 1)
    control_diff = float(np.max(np.abs(wrong_logits - np.array(prompts_out[1]["last_prompt_logits"]))))
    same = sum(a == b for a, b in zip(wrong_ids, prompts_out[1]["generated_ids"]))
    print(f"negative control (q/k not permuted): {same}/{NEW_TOKENS} tokens equal, max logit diff {control_diff:.3f}")
    if control_diff <= LOGIT_TOLERANCE:
        raise SystemExit("negative control failed: unpermuted q/k gave the same logits")

    golden = {
        "model": "stories260K (llama2.c) converted by src/convert/llama2c.ts",
        "generator": "tools/make_golden_llama2c.py",
        "reference": f"transformers {transformers.__version__} / torch {torch.__version__}, CPU float32, eager "
                     "attention; cross-checked with a float64 numpy port of llama2.c run.c on stories260K.bin",
        "decoding": {"greedy": True, "ignore_eos": True, "max_new_tokens": NEW_TOKENS},
        "checks": {
            "max_abs_logit_diff_numpy_vs_hf": worst_logit,
            "min_top2_logit_margin": worst_margin,
            "logit_tolerance": LOGIT_TOLERANCE,
            "negative_control_max_abs_logit_diff_unpermuted_qk": control_diff,
        },
        "prompts": prompts_out,
        "tokenizer": {
            "source": "sentencepiece on stories260K/tok512.model; ids without BOS",
            "bos_id": sp.bos_id(),
            "eos_id": sp.eos_id(),
            "cases": cases,
        },
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / "stories260k.json"
    out.write_text(dump_json(golden))
    print(f"wrote {out}")
    if llama2_cases is not None:
        out2 = args.out_dir / "llama2-tokenizer.json"
        out2.write_text(dump_json({
            "generator": "tools/make_golden_llama2c.py",
            "source": "sentencepiece on llama2-tokenizer/tokenizer.model; ids without BOS",
            "cases": llama2_cases,
        }))
        print(f"wrote {out2}")


if __name__ == "__main__":
    main()
