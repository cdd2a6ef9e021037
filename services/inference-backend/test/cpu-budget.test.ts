// The CPU budget: affinity capped by the cgroup CPU quota (v2 and v1 files), and the engine's
// default thread count that leaves one CPU to the event loop.
import { availableParallelism } from 'node:os';
import { describe, expect, it } from 'vitest';
import { cgroupCpuLimit, cpuBudget, defaultEngineThreads } from '../src/inference/cpu-budget.js';

const files =
  (entries: Record<string, string>) =>
  (path: string): string | undefined =>
    entries[path];

describe('cgroupCpuLimit', () => {
  it('reads a cgroup v2 quota, rounding part of a CPU up', () => {
    expect(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': '400000 100000\n' }))).toBe(4);
    expect(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': '150000 100000\n' }))).toBe(2);
    expect(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': '20000 100000\n' }))).toBe(1);
  });

  it('has no limit for cgroup v2 "max"', () => {
    expect(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': 'max 100000\n' }))).toBeUndefined();
  });

  it('reads a cgroup v1 quota, and -1 as no limit', () => {
    const v1 = (q: string) =>
      files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': q, '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n' });
    expect(cgroupCpuLimit(v1('300000\n'))).toBe(3);
    expect(cgroupCpuLimit(v1('-1\n'))).toBeUndefined();
  });

  it('ignores files it cannot read or parse', () => {
    expect(cgroupCpuLimit(files({}))).toBeUndefined();
    expect(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': 'garbage 0' }))).toBeUndefined();
  });
});

describe('cpuBudget and defaultEngineThreads', () => {
  it('caps affinity by the quota', () => {
    const fourCpus = files({ '/sys/fs/cgroup/cpu.max': '400000 100000' });
    expect(cpuBudget(fourCpus, 64)).toBe(4);
    expect(cpuBudget(fourCpus, 2)).toBe(2);
    expect(cpuBudget(files({}), 8)).toBe(8);
  });

  it('leaves one CPU to the event loop, keeping at least one engine thread', () => {
    expect(defaultEngineThreads(8)).toBe(7);
    expect(defaultEngineThreads(2)).toBe(1);
    expect(defaultEngineThreads(1)).toBe(1);
  });

  it('on this machine: between 1 and the CPUs the process may use', () => {
    const budget = cpuBudget();
    expect(budget).toBeGreaterThanOrEqual(1);
    expect(budget).toBeLessThanOrEqual(availableParallelism());
  });
});
