import {
  baseServiceEnv,
  baseServiceSchema,
  configFields,
  type EnvMap,
  identityConfigSchema,
  identityEnv,
} from '@strata/common';
import { z } from 'zod';
import { DEFAULT_LOAD_MAX_AGE_MS } from './routing/backend-state.js';

export const configSchema = baseServiceSchema.extend({
  port: configFields.port(8081),
  /** YAML routing file (pools, rules, default); hot-reloaded. Absent: one pool, backendUrl. */
  routesFile: z.string().min(1).optional(),
  /** The single backend of the embedded default routing (local runs). */
  backendUrl: z.url().default('http://127.0.0.1:8000'),
  /** Session affinity in Redis when set; otherwise an in-memory store (one replica only). */
  redisUrl: z.string().min(1).optional(),
  sessionTtlMs: configFields.positiveInt(30 * 60_000),
  /**
   * The edge's signed identity: keys to verify it with, and what to do with a request without a
   * valid one (anonymous: tenant "unverified" at the lowest priority; refuse: 401).
   */
  identity: identityConfigSchema,
  /** Kubeconfig for pools with `discovery`; absent: the pod's in-cluster service account. */
  kubeconfig: z.string().min(1).optional(),
  retry: z
    .object({
      /** Candidates tried at most per request. */
      attempts: configFields.positiveInt(3),
      /** No new attempt starts after this long, in ms. */
      deadlineMs: configFields.positiveInt(10_000),
    })
    .prefault({}),
  health: z
    .object({
      probeIntervalMs: configFields.positiveInt(1_000),
      loadIntervalMs: configFields.positiveInt(100),
      /** A load report older than this, in ms, counts as unknown: scored neutrally, never saturated. */
      loadMaxAgeMs: configFields.positiveInt(DEFAULT_LOAD_MAX_AGE_MS),
    })
    .prefault({}),
});
export type Config = z.output<typeof configSchema>;

export const configEnv: EnvMap = {
  ...baseServiceEnv,
  ...identityEnv,
  routesFile: 'STRATA_ROUTES_FILE',
  backendUrl: 'STRATA_BACKEND_URL',
  redisUrl: 'REDIS_URL',
  sessionTtlMs: 'STRATA_SESSION_TTL_MS',
  kubeconfig: 'KUBECONFIG',
  'retry.attempts': 'STRATA_RETRY_ATTEMPTS',
  'retry.deadlineMs': 'STRATA_RETRY_DEADLINE_MS',
  'health.probeIntervalMs': 'STRATA_HEALTH_PROBE_INTERVAL_MS',
  'health.loadIntervalMs': 'STRATA_LOAD_POLL_INTERVAL_MS',
  'health.loadMaxAgeMs': 'STRATA_LOAD_MAX_AGE_MS',
};
/** Environment variable naming an optional YAML config file. */
export const CONFIG_FILE_ENV = 'STRATA_ROUTER_CONFIG';
