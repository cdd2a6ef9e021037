"""TTFT and throughput over time from a k6 CSV (k6 run --out csv=FILE) -> a PNG.

usage: plot.py SAMPLES.csv OUT.png TITLE
Top: every streaming request's TTFT (dots) with the per-second median and p95.
Bottom: output tokens/s and requests/s, per second of the run.
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(samples, out, title):
    ttft = []  # (t, ms)
    tokens = defaultdict(float)  # second -> output tokens
    requests = defaultdict(float)
    start = None
    with open(samples, newline="") as f:
        for row in csv.DictReader(f):
            name = row["metric_name"]
            if name not in ("strata_ttft_ms", "strata_output_tokens", "strata_requests"):
                continue
            t = int(row["timestamp"])
            start = t if start is None else min(start, t)
            value = float(row["metric_value"])
            if name == "strata_ttft_ms":
                ttft.append((t, value))
            elif name == "strata_output_tokens":
                tokens[t] += value
            else:
                requests[t] += value
    if start is None:
        sys.exit(f"no strata_* samples in {samples}")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    fig.suptitle(title)
    by_second = defaultdict(list)
    for t, v in ttft:
        by_second[t - start].append(v)
    top.scatter([t - start for t, _ in ttft], [v for _, v in ttft], s=4, alpha=0.3, label="request")
    seconds = sorted(by_second)
    top.plot(seconds, [percentile(by_second[s], 0.5) for s in seconds], label="median")
    top.plot(seconds, [percentile(by_second[s], 0.95) for s in seconds], label="p95")
    top.set_ylabel("TTFT (ms)")
    top.set_yscale("log")
    top.legend(loc="upper left")
    top.grid(True, alpha=0.3)

    end = max(list(tokens) + list(requests) + [start]) - start
    xs = list(range(end + 1))
    bottom.plot(xs, [tokens.get(start + x, 0) for x in xs], label="output tokens/s")
    bottom.set_ylabel("output tokens/s")
    bottom.set_xlabel("seconds into the run")
    bottom.grid(True, alpha=0.3)
    right = bottom.twinx()
    right.plot(xs, [requests.get(start + x, 0) for x in xs], color="tab:orange", label="requests/s")
    right.set_ylabel("requests/s")
    lines = bottom.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    bottom.legend(lines, [l.get_label() for l in lines], loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
