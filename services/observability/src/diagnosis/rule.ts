// The saturation rule: what limits this backend right now. A pure function of one evaluation's
// inputs; hysteresis lives in diagnoser.ts. docs/observability.md states the same rule.

export const SATURATION_STATES = [
  'idle',
  'healthy',
  'queueing',
  'memory_pressure',
  'compute_saturated',
] as const;
export type SaturationState = (typeof SATURATION_STATES)[number];

export interface DiagnosisInputs {
  running: number;
  waiting: number;
  /** Used KV blocks / total, 0..1. */
  kvUsage: number;
  /** Preemptions counted within the preemption window. */
  recentPreemptions: number;
  /** Busiest GPU's utilisation, 0..1; undefined with no GPU telemetry. */
  gpuUtil: number | undefined;
}

export interface DiagnosisThresholds {
  kvHighRatio: number;
  gpuBusyRatio: number;
}

/**
 * First match wins, most fundamental limit first:
 *  1. idle              no request running or waiting;
 *  2. memory_pressure   KV usage >= kvHighRatio, or preemptions in the window (the KV pool, not
 *                       compute, caps the batch: more compute would not help);
 *  3. compute_saturated busiest GPU >= gpuBusyRatio (the batch is limited by compute);
 *  4. queueing          requests wait although KV and compute have room (batch-size limit
 *                       max_num_seqs / token budget: capacity, not hardware, is short);
 *  5. healthy           work runs, nothing waits, no resource is near its limit.
 */
export function classify(inputs: DiagnosisInputs, thresholds: DiagnosisThresholds): SaturationState {
  if (inputs.running + inputs.waiting === 0) return 'idle';
  if (inputs.kvUsage >= thresholds.kvHighRatio || inputs.recentPreemptions > 0) return 'memory_pressure';
  if (inputs.gpuUtil !== undefined && inputs.gpuUtil >= thresholds.gpuBusyRatio) return 'compute_saturated';
  if (inputs.waiting > 0) return 'queueing';
  return 'healthy';
}
