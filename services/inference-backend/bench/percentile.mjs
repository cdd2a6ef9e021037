// The nearest-rank percentile the benchmarks' Node clients report (http-latency.mjs,
// scripts/device/service-load.mjs). Dependency-free: the service bundle's Node runs it on a
// machine without the workspace.

/** The p-th percentile (0 < p <= 100) of values by nearest rank; NaN for none. */
export function percentile(values, p) {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length))) - 1];
}
