import { describe, expect, it } from 'vitest';
import { Diagnoser, type Observation } from '../src/diagnosis/diagnoser.js';
import { classify, type DiagnosisInputs } from '../src/diagnosis/rule.js';

const thresholds = { kvHighRatio: 0.9, gpuBusyRatio: 0.9 };
const base: DiagnosisInputs = {
  running: 2,
  waiting: 0,
  kvUsage: 0.3,
  recentPreemptions: 0,
  gpuUtil: undefined,
};

describe('classify', () => {
  it('is idle with nothing running or waiting, whatever else says', () => {
    expect(classify({ ...base, running: 0, kvUsage: 0.99, gpuUtil: 1 }, thresholds)).toBe('idle');
  });

  it('puts memory pressure first: KV at the threshold or any recent preemption', () => {
    expect(classify({ ...base, kvUsage: 0.9, waiting: 5, gpuUtil: 1 }, thresholds)).toBe('memory_pressure');
    expect(classify({ ...base, kvUsage: 0.2, recentPreemptions: 1 }, thresholds)).toBe('memory_pressure');
    expect(classify({ ...base, kvUsage: 0.899 }, thresholds)).toBe('healthy');
  });

  it('is compute saturated when the busiest GPU is at the threshold, before queueing', () => {
    expect(classify({ ...base, gpuUtil: 0.9, waiting: 3 }, thresholds)).toBe('compute_saturated');
    expect(classify({ ...base, gpuUtil: 0.89, waiting: 3 }, thresholds)).toBe('queueing');
  });

  it('is queueing when requests wait with KV and compute to spare, else healthy', () => {
    expect(classify({ ...base, waiting: 1 }, thresholds)).toBe('queueing');
    expect(classify({ ...base, running: 0, waiting: 1 }, thresholds)).toBe('queueing');
    expect(classify(base, thresholds)).toBe('healthy');
  });
});

describe('Diagnoser', () => {
  const obs = (atMs: number, o: Partial<Observation> = {}): Observation => ({
    running: 1,
    waiting: 0,
    kvUsage: 0.1,
    preemptionsTotal: 0,
    gpuUtil: undefined,
    atMs,
    ...o,
  });

  it('takes the first state at once, then needs confirmSamples in a row to change', () => {
    const d = new Diagnoser({ ...thresholds, preemptionWindowMs: 10_000, confirmSamples: 3 });
    expect(d.observe(obs(0))).toBe('healthy');
    expect(d.observe(obs(1, { waiting: 4 }))).toBe('healthy');
    expect(d.observe(obs(2, { waiting: 4 }))).toBe('healthy');
    // An interruption restarts the count.
    expect(d.observe(obs(3))).toBe('healthy');
    expect(d.observe(obs(4, { waiting: 4 }))).toBe('healthy');
    expect(d.observe(obs(5, { waiting: 4 }))).toBe('healthy');
    expect(d.observe(obs(6, { waiting: 4 }))).toBe('queueing');
    expect(d.inputs).toEqual({
      running: 1,
      waiting: 4,
      kvUsage: 0.1,
      recentPreemptions: 0,
      gpuUtil: undefined,
    });
  });

  it('counts preemptions over the window from the engine total, and forgets them after it', () => {
    const d = new Diagnoser({ ...thresholds, preemptionWindowMs: 1_000, confirmSamples: 1 });
    expect(d.observe(obs(0, { preemptionsTotal: 10 }))).toBe('healthy');
    expect(d.observe(obs(500, { preemptionsTotal: 12 }))).toBe('memory_pressure');
    expect(d.inputs?.recentPreemptions).toBe(2);
    expect(d.observe(obs(1_400, { preemptionsTotal: 12 }))).toBe('memory_pressure');
    expect(d.observe(obs(2_000, { preemptionsTotal: 12 }))).toBe('healthy');
    expect(d.inputs?.recentPreemptions).toBe(0);
    // A restarted engine (total went down) is a fresh start, not negative preemptions.
    expect(d.observe(obs(2_100, { preemptionsTotal: 0 }))).toBe('healthy');
    expect(d.inputs?.recentPreemptions).toBe(0);
  });

  it('reports idle once the work is gone', () => {
    const d = new Diagnoser({ ...thresholds, preemptionWindowMs: 10_000, confirmSamples: 2 });
    d.observe(obs(0, { kvUsage: 0.95 }));
    expect(d.state).toBe('memory_pressure');
    d.observe(obs(1, { running: 0, kvUsage: 0 }));
    expect(d.observe(obs(2, { running: 0, kvUsage: 0 }))).toBe('idle');
  });
});
