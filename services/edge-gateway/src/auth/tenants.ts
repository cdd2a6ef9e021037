// The tenants file: who may call the platform, by the SHA-256 of their API keys (never the keys
// themselves), each tenant's quota limits and tier, and optionally the tier table. Validated
// once per load; a bad file names every problem.
import {
  ConfigError,
  HIGHEST_PRIORITY,
  LOWEST_PRIORITY,
  UNVERIFIED_TENANT,
  UNVERIFIED_TIER,
} from '@strata/common';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { DEFAULT_TIER_NAME, DEFAULT_TIERS, type Tier } from './tiers.js';

const keyHash = z
  .string()
  .regex(/^sha256:[0-9a-f]{64}$/, 'a key must be "sha256:" followed by 64 lowercase hex digits');

const tenantSchema = z.strictObject({
  /** Sent upstream as x-strata-tenant; also a metric label, so short and plain. */
  name: z
    .string()
    .regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'a tenant name is 1-63 of a-z 0-9 . _ -')
    // The router and backends serve requests without a valid identity as this tenant.
    .refine((name) => name !== UNVERIFIED_TENANT, `"${UNVERIFIED_TENANT}" is reserved`),
  keys: z.array(keyHash).min(1),
  /** Bounds the priority the tenant may ask for; absent: standard. */
  tier: z.string().optional(),
  /** 0 = unlimited; absent = the edge's default. */
  requests_per_minute: z.number().int().min(0).optional(),
  tokens_per_minute: z.number().int().min(0).optional(),
});

const TIER_NAME = /^[a-z][a-z0-9_-]{0,31}$/;
const priority = z.number().int().min(HIGHEST_PRIORITY).max(LOWEST_PRIORITY);
const tierSchema = z
  .strictObject({ min: priority, max: priority, default: priority })
  .refine((t) => t.min <= t.default && t.default <= t.max, 'a tier needs min <= default <= max');

const tenantsFileSchema = z
  .strictObject({
    /** Replaces or adds to the built-in tiers (tiers.ts), by name. */
    tiers: z.record(z.string(), tierSchema).optional(),
    tenants: z.array(tenantSchema),
  })
  .superRefine((file, ctx) => {
    const tiers = { ...DEFAULT_TIERS, ...file.tiers };
    for (const name of Object.keys(file.tiers ?? {})) {
      // Tier names travel in the signed identity and in logs.
      const problem = !TIER_NAME.test(name)
        ? 'a tier name is 1-32 of a-z 0-9 _ -, starting with a letter'
        : name === UNVERIFIED_TIER
          ? `"${UNVERIFIED_TIER}" is reserved for requests without a valid identity`
          : undefined;
      if (problem) ctx.addIssue({ code: 'custom', path: ['tiers', name], message: problem });
    }
    const names = new Set<string>();
    const keys = new Map<string, string>();
    file.tenants.forEach((tenant, i) => {
      if (names.has(tenant.name)) {
        ctx.addIssue({
          code: 'custom',
          path: ['tenants', i, 'name'],
          message: `duplicate tenant "${tenant.name}"`,
        });
      }
      names.add(tenant.name);
      if (tenant.tier !== undefined && !Object.hasOwn(tiers, tenant.tier)) {
        ctx.addIssue({
          code: 'custom',
          path: ['tenants', i, 'tier'],
          message: `unknown tier "${tenant.tier}"; the tiers are ${Object.keys(tiers).join(', ')}`,
        });
      }
      tenant.keys.forEach((key, k) => {
        const owner = keys.get(key);
        if (owner !== undefined) {
          ctx.addIssue({
            code: 'custom',
            path: ['tenants', i, 'keys', k],
            message: `this key hash is already given to tenant "${owner}"`,
          });
        }
        keys.set(key, tenant.name);
      });
    });
  });

export interface Tenant {
  name: string;
  /** Undefined: the edge's default limit. */
  requestsPerMinute: number | undefined;
  tokensPerMinute: number | undefined;
  tier: Tier;
}

export interface TenantKey {
  /** The 32-byte SHA-256 digest of the API key. */
  digest: Buffer;
  tenant: Tenant;
}

export function parseTenantsYaml(text: string, source: string): TenantKey[] {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(source, [`not valid YAML: ${(err as Error).message}`]);
  }
  const result = tenantsFileSchema.safeParse(doc);
  if (!result.success) {
    throw new ConfigError(
      source,
      result.error.issues.map((issue) => `${issue.path.map(String).join('.') || '(root)'}: ${issue.message}`),
    );
  }
  const tiers: Record<string, Tier> = { ...DEFAULT_TIERS };
  for (const [name, t] of Object.entries(result.data.tiers ?? {})) tiers[name] = { name, ...t };
  return result.data.tenants.flatMap((t) => {
    const tenant: Tenant = {
      name: t.name,
      requestsPerMinute: t.requests_per_minute,
      tokensPerMinute: t.tokens_per_minute,
      tier: tiers[t.tier ?? DEFAULT_TIER_NAME] as Tier,
    };
    return t.keys.map((key) => ({ digest: Buffer.from(key.slice('sha256:'.length), 'hex'), tenant }));
  });
}
