// The diagnosis as metrics: strata_saturation_state{state} one-hot (all 0 until the first
// backend poll), and the inputs it used, one gauge each. Per-backend inputs are what the
// recording rules in alerts/strata-sidecar.yaml aggregate into a cross-backend imbalance.
import { Gauge, type Registry } from '@strata/common';
import type { Diagnoser } from './diagnoser.js';
import { type DiagnosisInputs, SATURATION_STATES } from './rule.js';

/** Every series carries the backend's model_name; none exists before the first backend poll. */
export function registerDiagnosisMetrics(
  registry: Registry,
  diagnoser: Diagnoser,
  modelName: () => string | undefined,
): void {
  new Gauge<'state' | 'model_name'>({
    name: 'strata_saturation_state',
    help: 'What limits this backend now (one-hot): idle, healthy, queueing, memory_pressure, compute_saturated.',
    labelNames: ['state', 'model_name'],
    registers: [registry],
    collect() {
      this.reset();
      const model_name = modelName();
      if (diagnoser.state === undefined || model_name === undefined) return;
      for (const state of SATURATION_STATES)
        this.set({ state, model_name }, diagnoser.state === state ? 1 : 0);
    },
  });
  const input = (name: string, help: string, read: (i: DiagnosisInputs) => number | undefined) =>
    new Gauge<'model_name'>({
      name,
      help,
      labelNames: ['model_name'],
      registers: [registry],
      collect() {
        this.reset();
        const model_name = modelName();
        const value = diagnoser.inputs ? read(diagnoser.inputs) : undefined;
        if (value !== undefined && model_name !== undefined) this.set({ model_name }, value);
      },
    });
  input(
    'strata_saturation_input_requests_running',
    'Requests in the running batch, as last diagnosed.',
    (i) => i.running,
  );
  input(
    'strata_saturation_input_requests_waiting',
    'Requests queued in the engine (preempted included), as last diagnosed; the per-backend queue depth.',
    (i) => i.waiting,
  );
  input(
    'strata_saturation_input_kv_usage_ratio',
    'KV blocks used / total (0..1), as last diagnosed.',
    (i) => i.kvUsage,
  );
  input(
    'strata_saturation_input_recent_preemptions',
    'Preemptions within the preemption window, as last diagnosed.',
    (i) => i.recentPreemptions,
  );
  input(
    'strata_saturation_input_gpu_util_ratio',
    'Busiest GPU utilisation (0..1), as last diagnosed; absent without GPU telemetry.',
    (i) => i.gpuUtil,
  );
}
