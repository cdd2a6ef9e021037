// API-key auth: `Authorization: Bearer <key>` -> tenant. The presented key is hashed and compared
// with every stored hash in constant time, without stopping at a match, so neither the time
// taken nor the answer tells a caller anything but "valid" or "not valid".
import { createHash, hash, timingSafeEqual } from 'node:crypto';
import { StrataError } from '@strata/common';
import type { Tenant, TenantKey } from './tenants.js';
import { DEFAULT_TIER_NAME, DEFAULT_TIERS } from './tiers.js';

/** The tenant of every request when no tenants file is configured (local runs). */
export const ANONYMOUS: Tenant = {
  name: 'anonymous',
  requestsPerMinute: undefined,
  tokensPerMinute: undefined,
  tier: DEFAULT_TIERS[DEFAULT_TIER_NAME],
};

const MISSING = 'Send an API key as "Authorization: Bearer <key>".';
const INVALID = 'The API key is not valid.';

export function hashKey(key: string): string {
  return `sha256:${createHash('sha256').update(key, 'utf8').digest('hex')}`;
}

/** The key in an Authorization header, or undefined when the header is absent or not Bearer. */
function bearerKey(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const match = /^Bearer +(\S+) *$/i.exec(header);
  return match?.[1];
}

/**
 * Resolves the caller's tenant. `keys` undefined means auth is off; otherwise a missing or
 * unknown key is a 401 whose message says only what to send.
 */
export function authenticate(header: string | undefined, keys: readonly TenantKey[] | undefined): Tenant {
  if (keys === undefined) return ANONYMOUS;
  const key = bearerKey(header);
  if (key === undefined) throw new StrataError('STRATA_UNAUTHORIZED', MISSING);
  const digest = hash('sha256', key, 'buffer'); // one call: no Hash object per request
  let found: Tenant | undefined;
  for (const entry of keys) {
    // Every entry is compared; the match is remembered, not returned early.
    if (timingSafeEqual(digest, entry.digest) && found === undefined) found = entry.tenant;
  }
  if (found === undefined) throw new StrataError('STRATA_UNAUTHORIZED', INVALID);
  return found;
}
