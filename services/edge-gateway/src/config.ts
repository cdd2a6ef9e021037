import {
  baseServiceEnv,
  baseServiceSchema,
  configFields,
  type EnvMap,
  identityKeysField,
} from '@strata/common';
import { z } from 'zod';

const perMinute = (fallback: number) => z.coerce.number().int().min(0).default(fallback);

export const configSchema = baseServiceSchema.extend({
  port: configFields.port(8080),
  /** The router every accepted request goes to. */
  routerUrl: z.url().default('http://127.0.0.1:8081'),
  /**
   * YAML naming tenants and the SHA-256 hashes of their API keys (a mounted Secret in
   * Kubernetes; hot-reloaded). Absent: auth is off and every request is tenant "anonymous".
   */
  tenantsFile: z.string().min(1).optional(),
  identity: z
    .object({
      /**
       * HMAC keys, "id:base64secret,…": the first signs each forwarded request's identity
       * (tenant, tier, granted priority) for the router and backends. None: nothing is signed.
       */
      keys: identityKeysField(),
    })
    .prefault({}),
  /** Largest accepted request body, in bytes (413 above it). */
  maxBodyBytes: configFields.positiveInt(1024 * 1024),
  quota: z
    .object({
      /** Quota state shared by every edge replica; absent: in memory (one replica only). */
      redisUrl: z.string().min(1).optional(),
      /** Redis unreachable: admit without quotas ("open") or answer 503 ("closed"). */
      failMode: z.enum(['open', 'closed']).default('open'),
      /** Limits for tenants that set none; 0 = unlimited. */
      requestsPerMinute: perMinute(600),
      tokensPerMinute: perMinute(1_000_000),
    })
    .prefault({}),
  upstream: z
    .object({
      /**
       * Longest wait for the router's response headers, in ms. A non-streaming generation
       * answers only when done, so this must exceed the backend's request deadline.
       */
      headersTimeoutMs: configFields.positiveInt(300_000),
      /** Concurrent connections to the router per edge replica. */
      connections: configFields.positiveInt(512),
    })
    .prefault({}),
});
export type Config = z.output<typeof configSchema>;

export const configEnv: EnvMap = {
  ...baseServiceEnv,
  routerUrl: 'STRATA_ROUTER_URL',
  tenantsFile: 'STRATA_EDGE_TENANTS_FILE',
  maxBodyBytes: 'STRATA_EDGE_MAX_BODY_BYTES',
  'identity.keys': 'STRATA_IDENTITY_KEYS',
  'quota.redisUrl': 'REDIS_URL',
  'quota.failMode': 'STRATA_EDGE_QUOTA_FAIL_MODE',
  'quota.requestsPerMinute': 'STRATA_EDGE_DEFAULT_RPM',
  'quota.tokensPerMinute': 'STRATA_EDGE_DEFAULT_TPM',
  'upstream.headersTimeoutMs': 'STRATA_EDGE_UPSTREAM_HEADERS_TIMEOUT_MS',
  'upstream.connections': 'STRATA_EDGE_UPSTREAM_CONNECTIONS',
};
/** Environment variable naming an optional YAML config file. */
export const CONFIG_FILE_ENV = 'STRATA_EDGE_CONFIG';
