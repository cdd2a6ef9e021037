import { baseServiceEnv, baseServiceSchema, configFields, type EnvMap } from '@strata/common';
import { z } from 'zod';

const ratio = (fallback: number) => z.coerce.number().min(0).max(1).default(fallback);

export const configSchema = baseServiceSchema.extend({
  port: configFields.port(9400),
  /** The backend beside this sidecar (same pod); its /load and /metrics are polled. */
  backendUrl: z.url().default('http://127.0.0.1:8000'),
  /** How often the backend is polled and the diagnosis re-evaluated, in ms. */
  backendIntervalMs: configFields.positiveInt(250),
  /** Timeout of one backend poll, in ms. */
  backendTimeoutMs: configFields.positiveInt(1_000),
  gpu: z
    .object({
      /** The nvidia-smi executable (a name looked up on PATH, or a path). */
      nvidiaSmi: z.string().min(1).default('nvidia-smi'),
      /** How often nvidia-smi is queried, in ms. */
      intervalMs: configFields.positiveInt(1_000),
      /** Timeout of one query (nvidia-smi or DCGM read), in ms. */
      timeoutMs: configFields.positiveInt(5_000),
      /** dcgm-exporter's /metrics on this node, read before nvidia-smi; unset: nvidia-smi only. */
      dcgmUrl: z.url().optional(),
      /** After a failed DCGM read, nvidia-smi alone is used for this long, in ms. */
      dcgmRetryMs: configFields.positiveInt(30_000),
    })
    .prefault({}),
  /** This pod (downward API), to pick its GPUs out of dcgm-exporter's series. */
  pod: z
    .object({
      /** Unset: the host name, which is the pod name unless the pod sets spec.hostname. */
      name: z.string().min(1).optional(),
      /** Unset: the pod name alone must match. */
      namespace: z.string().min(1).optional(),
    })
    .prefault({}),
  /** The saturation rule's thresholds; docs/observability.md explains each. */
  diagnosis: z
    .object({
      /** KV usage (0..1) at or above which work is under memory pressure. */
      kvHighRatio: ratio(0.9),
      /** GPU utilisation (0..1) at or above which work is compute saturated. */
      gpuBusyRatio: ratio(0.9),
      /** Preemptions within this window (ms) mean memory pressure. */
      preemptionWindowMs: configFields.positiveInt(10_000),
      /** Consecutive evaluations a new state must hold before it is reported (hysteresis). */
      confirmSamples: configFields.positiveInt(3),
    })
    .prefault({}),
});
export type Config = z.output<typeof configSchema>;

export const configEnv: EnvMap = {
  ...baseServiceEnv,
  backendUrl: 'STRATA_BACKEND_URL',
  backendIntervalMs: 'STRATA_SIDECAR_BACKEND_INTERVAL_MS',
  backendTimeoutMs: 'STRATA_SIDECAR_BACKEND_TIMEOUT_MS',
  'gpu.nvidiaSmi': 'STRATA_SIDECAR_NVIDIA_SMI',
  'gpu.intervalMs': 'STRATA_SIDECAR_GPU_INTERVAL_MS',
  'gpu.timeoutMs': 'STRATA_SIDECAR_GPU_TIMEOUT_MS',
  'gpu.dcgmUrl': 'STRATA_DCGM_URL',
  'gpu.dcgmRetryMs': 'STRATA_SIDECAR_DCGM_RETRY_MS',
  'pod.name': 'STRATA_POD_NAME',
  'pod.namespace': 'STRATA_POD_NAMESPACE',
  'diagnosis.kvHighRatio': 'STRATA_SIDECAR_KV_HIGH_RATIO',
  'diagnosis.gpuBusyRatio': 'STRATA_SIDECAR_GPU_BUSY_RATIO',
  'diagnosis.preemptionWindowMs': 'STRATA_SIDECAR_PREEMPTION_WINDOW_MS',
  'diagnosis.confirmSamples': 'STRATA_SIDECAR_CONFIRM_SAMPLES',
};
/** Environment variable naming an optional YAML config file. */
export const CONFIG_FILE_ENV = 'STRATA_OBSERVABILITY_CONFIG';
