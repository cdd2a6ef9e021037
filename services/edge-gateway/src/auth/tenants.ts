// The tenants file: who may call the platform, by the SHA-256 of their API keys (never the keys
// themselves), and each tenant's quota limits. Validated once per load; a bad file names every
// problem.
import { ConfigError } from '@strata/common';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

const keyHash = z
  .string()
  .regex(/^sha256:[0-9a-f]{64}$/, 'a key must be "sha256:" followed by 64 lowercase hex digits');

const tenantSchema = z.strictObject({
  /** Sent upstream as x-strata-tenant; also a metric label, so short and plain. */
  name: z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'a tenant name is 1-63 of a-z 0-9 . _ -'),
  keys: z.array(keyHash).min(1),
  /** 0 = unlimited; absent = the edge's default. */
  requests_per_minute: z.number().int().min(0).optional(),
  tokens_per_minute: z.number().int().min(0).optional(),
});

const tenantsFileSchema = z.strictObject({ tenants: z.array(tenantSchema) }).superRefine((file, ctx) => {
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
  return result.data.tenants.flatMap((t) => {
    const tenant: Tenant = {
      name: t.name,
      requestsPerMinute: t.requests_per_minute,
      tokensPerMinute: t.tokens_per_minute,
    };
    return t.keys.map((key) => ({ digest: Buffer.from(key.slice('sha256:'.length), 'hex'), tenant }));
  });
}
