#!/usr/bin/env python3
"""Where a step's GPU time goes: Nsight Compute's per-kernel durations, summed by kernel.

The plan's `profile` step runs bench_cuda_forward once per phase under
`ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv
--print-units base`, so each CSV holds the kernels of exactly one step (a prefill step, or a
sampled decode step of one batch size). This script sums them by kernel (its name without the
argument list), puts each into a class (GEMM, attention, sampling, other), and writes the
totals as JSON and a table per phase.

    ncu_summary.py out.json NN-profile.PHASE.csv...

ncu serialises the kernels, so the sum is each kernel's own time with no launch gaps between
them: set it beside the step's time measured without the profiler (bench_cuda_forward) to
see what the gaps cost.
"""
import csv
import json
import os
import re
import sys


def short_name(name):
    """`void ns::k<float, 16>(Params)` -> `k<float, 16>`; cuBLAS's long names kept whole."""
    name = re.sub(r"^void\s+", "", name.strip())
    name = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", name)  # before looking for the '('
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the argument list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    # Namespaces, including anonymous ones, off the function's own name.
    head, sep, args = name.partition("<")
    head = head.split("::")[-1]
    args = args.replace("strata::cuda::", "")
    return head + sep + args


def kind(name):
    low = name.lower()
    if any(k in low for k in ("gemm", "gemv", "xmma", "nvjet", "cutlass", "cublas", "quant_")):
        return "gemm"
    if "attention" in low or "decode_" in low or "prefill" in low:
        return "attention"
    if "sample" in low or "sampling" in low or "topk" in low or "softmax" in low:
        return "sampling"
    return "other"


def read_durations(path):
    """(kernel name, nanoseconds) for each profiled kernel in ncu's CSV."""
    rows = []
    with open(path, newline="", errors="replace") as f:
        lines = [line for line in f if line.startswith('"')]
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        return rows
    try:
        name_at, metric_at, unit_at, value_at = (header.index(k) for k in
                                                 ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
    except ValueError:
        raise SystemExit(f"{path}: not ncu's --csv output (header {header})")
    scale = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
    for row in reader:
        if len(row) <= value_at or row[metric_at] != "gpu__time_duration.sum":
            continue
        value = float(row[value_at].replace(",", ""))
        rows.append((row[name_at], value * scale.get(row[unit_at], 1.0)))
    return rows


def summarise(path):
    phase = os.path.basename(path).split(".")[-2]  # NN-profile.PHASE.csv
    kernels = {}
    for name, ns in read_durations(path):
        k = kernels.setdefault(short_name(name), {"count": 0, "ns": 0.0})
        k["count"] += 1
        k["ns"] += ns
    total = sum(k["ns"] for k in kernels.values())
    by_kind = {}
    for name, k in kernels.items():
        by_kind[kind(name)] = by_kind.get(kind(name), 0.0) + k["ns"]
    ordered = sorted(kernels.items(), key=lambda kv: -kv[1]["ns"])
    return {
        "phase": phase,
        "kernels": sum(k["count"] for k in kernels.values()),
        "total_us": total / 1e3,
        "by_class_us": {c: ns / 1e3 for c, ns in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "by_kernel": [{"kernel": n, "class": kind(n), "count": k["count"], "total_us": k["ns"] / 1e3,
                       "share": k["ns"] / total if total else 0.0} for n, k in ordered],
    }


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    phases = [summarise(p) for p in argv[2:]]
    with open(argv[1], "w") as f:
        json.dump({"profile": "ncu gpu__time_duration.sum per kernel, one step per phase", "phases": phases}, f,
                  indent=1)
    for p in phases:
        classes = ", ".join(f"{c} {us:.0f} us" for c, us in p["by_class_us"].items())
        print(f"\n{p['phase']}: {p['kernels']} kernels, {p['total_us']:.0f} us of kernel time ({classes})")
        print(f"{'kernel':<72} {'class':<9} {'n':>5} {'us':>10} {'share':>6}")
        for k in p["by_kernel"][:12]:
            print(f"{k['kernel'][:72]:<72} {k['class']:<9} {k['count']:>5} {k['total_us']:>10.1f} {k['share']:>6.1%}")
        if not p["kernels"]:
            print("(no kernels: did the profiled step run?)")
    return 0 if all(p["kernels"] for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
