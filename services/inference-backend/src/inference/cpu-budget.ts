// How many CPUs this process may use, and how many of them the CPU engine computes on.
// Affinity alone overcounts in a container: Kubernetes enforces a CPU limit as a CFS quota, so a
// pod limited to 4 CPUs on a 64-core node still sees 64 cores. The quota is read from the
// cgroup (v2 cpu.max, else v1 cfs_quota_us/cfs_period_us) as the container sees its own cgroup.
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

export type ReadText = (path: string) => string | undefined;

const readText: ReadText = (path) => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
};

/** CPUs from the cgroup quota (rounded up), or undefined when there is no quota. */
export function cgroupCpuLimit(read: ReadText = readText): number | undefined {
  const v2 = read('/sys/fs/cgroup/cpu.max')?.trim().split(/\s+/);
  if (v2 && v2.length === 2) return v2[0] === 'max' ? undefined : quota(Number(v2[0]), Number(v2[1]));
  const v1Quota = Number(read('/sys/fs/cgroup/cpu/cpu.cfs_quota_us')?.trim());
  const v1Period = Number(read('/sys/fs/cgroup/cpu/cpu.cfs_period_us')?.trim());
  return v1Quota > 0 ? quota(v1Quota, v1Period) : undefined;
}

function quota(microseconds: number, period: number): number | undefined {
  if (!(microseconds > 0) || !(period > 0)) return undefined;
  return Math.max(1, Math.ceil(microseconds / period));
}

/** CPUs this process may run on: affinity, capped by a cgroup CPU limit. */
export function cpuBudget(read: ReadText = readText, cores = availableParallelism()): number {
  return Math.min(cores, cgroupCpuLimit(read) ?? cores);
}

/**
 * Compute threads for the CPU engine when none are configured: every CPU of the budget but one
 * per event loop (STRATA_HTTP_WORKERS), at least one. The spare CPUs run the event loops (HTTP,
 * SSE writes, detokenization), which share the process with the engine; with all CPUs computing,
 * the two preempt each other on every step.
 */
export function defaultEngineThreads(budget = cpuBudget(), eventLoops = 1): number {
  return Math.max(1, budget - eventLoops);
}
