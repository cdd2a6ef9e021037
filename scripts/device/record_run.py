#!/usr/bin/env python3
"""Append one gpu-plan.sh call's results to docs/benchmarks/cuda-<gpu>.json.

usage: record_run.py RESULTS_DIR BENCH_JSON --commit C --command CMD [--calls TEXT]
                     [--profile-out PROFILE_JSON] [--note TEXT]

RESULTS_DIR is the unpacked results.tgz of the call (the plan's NN-step.* files). The
record keeps each step's status, time and note, every check program's count, and the
benchmarks' JSON as the programs wrote them. The ncu profiles (the profile, profile_gguf and
limits steps), when the call ran any, are appended to their own file (PROFILE_JSON:
{"profiles": [...]}, one per commit and step), which the run's record names. BENCH_JSON is
made when missing.
"""
import argparse
import datetime
import glob
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def one(results, pattern):
    hits = sorted(glob.glob(os.path.join(results, pattern)))
    return hits[-1] if hits else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("bench_json")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--calls", default="one, on a fresh machine")
    ap.add_argument("--profile-out")
    ap.add_argument("--note")
    a = ap.parse_args()

    machine = one(a.results, "*-machine.json")
    if not machine:
        sys.exit(f"record_run: no *-machine.json in {a.results}: not a gpu-plan results folder")
    device = load(machine)
    steps = {}
    for path in sorted(glob.glob(os.path.join(a.results, "*.step.json"))):
        s = load(path)
        steps[s["step"]] = {"status": s["status"], "seconds": s["seconds"], "note": s.get("note", "")}
    when = datetime.datetime.fromtimestamp(os.path.getmtime(machine), datetime.timezone.utc)
    run = {"commit": a.commit, "when": when.strftime("%Y-%m-%dT%H:%MZ"), "calls": a.calls,
           "command": a.command, "steps": steps}

    checks = []
    for name in ("gemm", "kernels", "quant", "sampling", "backend", "hf_logits", "gguf"):
        path = one(a.results, f"*-{name}.json")
        if path:
            d = load(path)
            rows = d.get("rows", [])
            checks.append({"step": name, "program": d["program"], "checks": len(rows),
                           "failed": sum(1 for r in rows if not r.get("pass")), "seed": str(d.get("seed"))})
    if checks:
        run["checks"] = checks
    for name in ("memcheck", "memcheck_quant", "memcheck_sampling", "racecheck_quant", "racecheck_sampling"):
        if name in steps:
            run[name] = steps[name]["note"]
    for key, pattern in (("hf_logits", "*-hf_logits.json"), ("forward", "*-forward.json"),
                         ("hf_generate", "*-hf_generate.json"), ("e2e", "*-e2e.json"),
                         ("bench_attention", "*-bench_attention.json"), ("service", "*-service.json"),
                         ("gemv", "*-gemv.json"), ("gguf_Q4_0", "*-gguf-Q4_0.json"), ("gguf_Q8_0", "*-gguf-Q8_0.json"),
                         ("gguf_Q4_0_tiled", "*-gguf-Q4_0-tiled.json"), ("gguf_load_Q4_0", "*-gguf-load-Q4_0.json"),
                         ("load_bf16", "*-load-bf16.json"), ("load_F16", "*-load-F16.json"),
                         ("programmatic", "*-programmatic.json"),
                         ("bench_gemm", "*-bench_gemm.json"), ("bench_quant", "*-bench_quant.json"),
                         ("bench_sampling", "*-bench_sampling.json")):
        path = one(a.results, pattern)
        if path:
            run[key] = load(path)
    for step, pattern in (("profile", "*-profile.json"), ("profile_gguf", "*-profile_gguf.json"),
                          ("limits", "*-limits.json")):
        profile = one(a.results, pattern)
        if not profile:
            continue
        if not a.profile_out:
            sys.exit(f"record_run: the call ran {step}; name the profiles' file with --profile-out")
        entry = {"commit": a.commit, "device": device, "command": a.command, "step": step, **load(profile)}
        if step == "profile_gguf":
            entry["model"] = "the Llama-3-8B-shaped model as Q4_0 (scripts/device/llama3_gguf.py)"
        elif step == "limits":
            entry["model"] = "the Llama-3-8B-shaped model in bf16 or as a GGUF copy, as each phase's name says"
        profiles = {"profiles": []}
        if os.path.exists(a.profile_out):
            old = load(a.profile_out)
            profiles = old if "profiles" in old else {"profiles": [old]}
        profiles["profiles"].append(entry)
        with open(a.profile_out, "w") as f:
            json.dump(profiles, f, indent=1)
            f.write("\n")
        run[step] = os.path.basename(a.profile_out)
    if a.note:
        run["note"] = a.note

    if os.path.exists(a.bench_json):
        bench = load(a.bench_json)
    else:
        bench = {"benchmark": "the CUDA backend on a GPU: checks, forward against the roofline, end to end against transformers", "device": device,
                 "model": "random Llama-3-8B-shaped weights, bf16 (scripts/device/llama3_random.py)", "runs": []}
    bench["runs"].append(run)
    with open(a.bench_json, "w") as f:
        json.dump(bench, f, indent=1)
        f.write("\n")
    print(f"record_run: {a.bench_json}: run {len(bench['runs'])} ({a.commit}), {len(steps)} steps")


if __name__ == "__main__":
    main()
