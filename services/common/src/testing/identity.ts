// Signed identities for tests that call the router or a backend directly, as the edge would.
import { randomBytes, randomUUID } from 'node:crypto';
import { HEADERS } from '../headers.js';
import { IDENTITY_TTL_MS, type IdentityKey, signIdentity } from '../identity.js';

export interface TestIdentityKey extends IdentityKey {
  /** The key as STRATA_IDENTITY_KEYS writes it: "id:base64secret". */
  env: string;
}

/** A fresh random key named `id`. */
export function testIdentityKey(id = 'k1'): TestIdentityKey {
  const secret = randomBytes(32);
  return { id, secret, env: `${id}:${secret.toString('base64')}` };
}

/**
 * The headers the edge sends for one request: x-request-id and an x-strata-identity signed with
 * `key` for it (default tenant "acme", tier standard, priority 0, a fresh request id).
 */
export function identityHeaders(
  key: IdentityKey,
  identity: {
    tenant?: string;
    tier?: string;
    priority?: number;
    requestId?: string;
    expiresAtMs?: number;
  } = {},
): Record<string, string> {
  const requestId = identity.requestId ?? randomUUID();
  return {
    [HEADERS.requestId]: requestId,
    [HEADERS.identity]: signIdentity(
      {
        tenant: identity.tenant ?? 'acme',
        tier: identity.tier ?? 'standard',
        priority: identity.priority ?? 0,
        requestId,
        expiresAtMs: identity.expiresAtMs ?? Date.now() + IDENTITY_TTL_MS,
      },
      key,
    ),
  };
}
