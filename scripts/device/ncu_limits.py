#!/usr/bin/env python3
"""What bounds each kernel: Nsight Compute's sections over the kernels of one step, one row each.

The plan's `limits` step runs bench_cuda_forward once per phase under
`ncu --profile-from-start off --graph-profiling node --section SpeedOfLight --section LaunchStats
--section Occupancy --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis
--section MemoryWorkloadAnalysis --page raw --csv --print-units base`, limited to the first
launches of the kernels it names (`--kernel-name regex:... --launch-count N`). The raw page has one
row per profiled kernel with every collected metric under its raw name. This script reads each
CSV (the raw page's one row per kernel, or the details page's one row per metric), keeps per
kernel the figures that say where it stands against the GPU's limits, and writes them as JSON and
one table per phase:

- time, grid, block, registers, waves per SM;
- speed of light: DRAM, SM, memory (the busiest memory unit), L1, L2 throughput in % of peak,
  and the DRAM bytes read and written over the kernel's time;
- occupancy: achieved and theoretical warps per SM in % of the maximum, eligible and issued
  warps per scheduler per cycle;
- the busiest execution pipes and the largest stall reasons (cycles a warp spent in each state
  per issued instruction, as ncu's Warp State section shows them), whatever this ncu version
  names them: every metric of those families is ranked.

    ncu_limits.py out.json NN-limits.TAG.PHASE.csv...

A name this ncu does not have leaves its column empty; the CSVs keep everything.
"""
import csv
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_summary import kind, short_name  # noqa: E402

# Each figure: the raw names it may have (the first one present wins).
FIELDS = {
    "duration_ns": ["gpu__time_duration.sum"],
    "registers": ["launch__registers_per_thread"],
    "block": ["launch__block_size"],
    "grid": ["launch__grid_size"],
    "waves_per_sm": ["launch__waves_per_multiprocessor"],
    "shared_bytes_per_block": ["launch__shared_mem_per_block"],
    "dram_pct": ["dram__throughput.avg.pct_of_peak_sustained_elapsed",
                 "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"],
    "sm_pct": ["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
    "memory_pct": ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"],
    "l1_pct": ["l1tex__throughput.avg.pct_of_peak_sustained_active"],
    "l2_pct": ["lts__throughput.avg.pct_of_peak_sustained_elapsed"],
    "dram_read_bytes": ["dram__bytes_read.sum"],
    "dram_write_bytes": ["dram__bytes_write.sum"],
    "occupancy_achieved_pct": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
    "occupancy_theoretical_pct": ["sm__maximum_warps_per_active_cycle_pct"],
    "eligible_warps_per_cycle": ["smsp__warps_eligible.avg.per_cycle_active"],
    "issued_per_cycle": ["smsp__issue_active.avg.per_cycle_active", "smsp__inst_issued.avg.per_cycle_active"],
    "issue_slots_busy_pct": ["sm__inst_issued.avg.pct_of_peak_sustained_active",
                             "smsp__issue_active.avg.pct_of_peak_sustained_active"],
    "cycles_per_issue": ["smsp__average_warp_latency_per_inst_issued.ratio",
                         "smsp__average_warps_active_per_inst_issued.ratio"],
}

# Families ranked per kernel: (regex on the raw name, the group its captured name goes into).
# Stalls are tried in order; the first family this ncu reports is used.
STALL_FAMILIES = [
    re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)\.ratio$"),
    re.compile(r"^smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$"),
]
PIPES = [
    re.compile(r"^sm__pipe_(\w+?)_cycles_active\.avg\.pct_of_peak_sustained_active$"),
    re.compile(r"^sm__inst_executed_pipe_(\w+?)\.avg\.pct_of_peak_sustained_active$"),
]


def number(text):
    """ncu's value text as a float (thousands separators dropped); None for n/a or text."""
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def read_kernels(path):
    """[(kernel name, {raw metric name: value})] in profiling order, from either CSV page."""
    if not os.path.isfile(path):
        raise SystemExit(f"{path}: no such file (did ncu run?)")
    with open(path, newline="", errors="replace") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        return []
    header = rows[0]
    if "Kernel Name" not in header:
        raise SystemExit(f"{path}: not ncu's --csv output (header {header[:6]})")
    name_at, id_at = header.index("Kernel Name"), header.index("ID")
    kernels = {}
    if "Metric Name" in header:  # details page: one row per (kernel, metric)
        metric_at, value_at = header.index("Metric Name"), header.index("Metric Value")
        for row in rows[1:]:
            if len(row) <= value_at:
                continue
            _, metrics = kernels.setdefault(row[id_at], (row[name_at], {}))
            value = number(row[value_at])
            if value is not None:
                metrics[row[metric_at]] = value
    else:  # raw page: one row per kernel, a metric a column (and a row of units first)
        for row in rows[1:]:
            if len(row) != len(header) or number(row[id_at]) is None:
                continue  # the units row
            metrics = {}
            for name, text in zip(header, row):
                value = number(text)
                if value is not None and "__" in name:
                    metrics[name] = value
            kernels[row[id_at]] = (row[name_at], metrics)
    return [kernels[k] for k in sorted(kernels, key=lambda k: number(k) or 0)]


def ranked(metrics, families, top):
    """The largest `top` members of the first family present: [[member, value], ...]."""
    for family in families:
        found = {}
        for name, value in metrics.items():
            m = family.match(name)
            if m and not m.group(1).endswith("not_issued"):
                found[m.group(1)] = value
        if found:
            return [[k, v] for k, v in sorted(found.items(), key=lambda kv: -kv[1])[:top] if v > 0]
    return []


def pipes(metrics, top):
    """The busiest pipes over both pipe families (cycles active, or instructions executed)."""
    found = {}
    for family in PIPES:
        for name, value in metrics.items():
            m = family.match(name)
            if m:
                found[m.group(1)] = max(value, found.get(m.group(1), 0.0))
    return [[k, v] for k, v in sorted(found.items(), key=lambda kv: -kv[1])[:top] if v > 0]


def kernel_row(name, metrics):
    row = {"kernel": short_name(name), "class": kind(short_name(name))}
    for field, names in FIELDS.items():
        row[field] = next((metrics[n] for n in names if n in metrics), None)
    moved = (row["dram_read_bytes"] or 0.0) + (row["dram_write_bytes"] or 0.0)
    row["dram_gb_per_s"] = moved / row["duration_ns"] if row["duration_ns"] and moved else None
    row["pipes_pct"] = pipes(metrics, 3)
    row["stalls"] = ranked(metrics, STALL_FAMILIES, 4)
    return row


def summarise(path):
    # NN-limits.TAG.PHASE.csv, PHASE as decode-1 or prefill
    phase = ".".join(os.path.basename(path).split(".")[1:-1])
    return {"phase": phase, "kernels": [kernel_row(n, m) for n, m in read_kernels(path)]}


def cell(value, digits=0):
    return "-" if value is None else f"{value:.{digits}f}"


def table(phase):
    lines = [f"\n{phase['phase']}: {len(phase['kernels'])} kernels",
             f"{'kernel':<44} {'grid':>6} {'blk':>4} {'reg':>4} {'us':>8} {'DRAM%':>6} {'GB/s':>6} {'SM%':>5} "
             f"{'L1%':>5} {'L2%':>5} {'occ%':>9} {'issue%':>6}  pipes; stalls (cycles per issue)"]
    for k in phase["kernels"]:
        occupancy = f"{cell(k['occupancy_achieved_pct'])}/{cell(k['occupancy_theoretical_pct'])}"
        pipe_text = " ".join(f"{p}:{v:.0f}" for p, v in k["pipes_pct"]) or "-"
        stall_text = " ".join(f"{s}:{v:.1f}" for s, v in k["stalls"]) or "-"
        lines.append(
            f"{k['kernel'][:44]:<44} {cell(k['grid']):>6} {cell(k['block']):>4} {cell(k['registers']):>4} "
            f"{cell(k['duration_ns'] and k['duration_ns'] / 1e3, 1):>8} {cell(k['dram_pct']):>6} "
            f"{cell(k['dram_gb_per_s']):>6} {cell(k['sm_pct']):>5} {cell(k['l1_pct']):>5} {cell(k['l2_pct']):>5} "
            f"{occupancy:>9} {cell(k['issue_slots_busy_pct']):>6}  {pipe_text}; {stall_text}")
    if not phase["kernels"]:
        lines.append("(no kernels: did the profiled step run, and does the kernel regex match?)")
    return "\n".join(lines)


def main(argv):
    if len(argv) < 3:
        print("usage: ncu_limits.py out.json NN-limits.TAG.PHASE.csv...", file=sys.stderr)
        return 2
    phases = [summarise(p) for p in argv[2:]]
    with open(argv[1], "w") as f:
        json.dump({"profile": "ncu sections per kernel (raw page), the first launches of the named kernels of one step "
                              "per phase", "phases": phases}, f, indent=1)
    for p in phases:
        print(table(p))
    return 0 if all(p["kernels"] for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
