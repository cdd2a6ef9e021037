// Applies the saturation rule on every backend poll, with two kinds of memory:
//  - preemptions are counted over a sliding window of the engine's preemption total;
//  - a new state is reported only after it was classified confirmSamples times in a row
//    (hysteresis), so one odd poll does not flip dashboards and alerts.
import { classify, type DiagnosisInputs, type DiagnosisThresholds, type SaturationState } from './rule.js';

export interface DiagnoserOptions extends DiagnosisThresholds {
  preemptionWindowMs: number;
  confirmSamples: number;
}

export interface Observation {
  running: number;
  waiting: number;
  kvUsage: number;
  /** The engine's cumulative preemption count; undefined when unknown. */
  preemptionsTotal: number | undefined;
  gpuUtil: number | undefined;
  /** Epoch ms. */
  atMs: number;
}

export class Diagnoser {
  /** The reported state; undefined until the first observation. */
  state: SaturationState | undefined;
  inputs: DiagnosisInputs | undefined;
  private pending: SaturationState | undefined;
  private pendingCount = 0;
  private readonly preemptionSamples: { atMs: number; total: number }[] = [];

  constructor(private readonly options: DiagnoserOptions) {}

  observe(o: Observation): SaturationState {
    const inputs: DiagnosisInputs = {
      running: o.running,
      waiting: o.waiting,
      kvUsage: o.kvUsage,
      recentPreemptions: this.recentPreemptions(o),
      gpuUtil: o.gpuUtil,
    };
    this.inputs = inputs;
    const candidate = classify(inputs, this.options);
    if (this.state === undefined || candidate === this.state) {
      this.state = candidate;
      this.pending = undefined;
      this.pendingCount = 0;
    } else {
      this.pendingCount = candidate === this.pending ? this.pendingCount + 1 : 1;
      this.pending = candidate;
      if (this.pendingCount >= this.options.confirmSamples) {
        this.state = candidate;
        this.pending = undefined;
        this.pendingCount = 0;
      }
    }
    return this.state;
  }

  // Growth of the preemption total across the window; a restarted engine (total went down)
  // starts the window afresh.
  private recentPreemptions(o: Observation): number {
    const samples = this.preemptionSamples;
    if (o.preemptionsTotal === undefined) return 0;
    const last = samples[samples.length - 1];
    if (last && o.preemptionsTotal < last.total) samples.length = 0;
    samples.push({ atMs: o.atMs, total: o.preemptionsTotal });
    // Keep one sample at or before the window's start as the baseline.
    while (
      samples.length > 1 &&
      (samples[1] as { atMs: number }).atMs <= o.atMs - this.options.preemptionWindowMs
    ) {
      samples.shift();
    }
    return o.preemptionsTotal - (samples[0] as { total: number }).total;
  }
}
