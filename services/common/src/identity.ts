// The platform identity of a request (docs/architecture.md, Headers). The edge signs who the
// caller is (tenant, tier), the priority it granted, the request id and an expiry with an HMAC
// key the layers share; the router and the backends verify it instead of trusting plain
// headers, which anyone inside the cluster network could set.
//
//   x-strata-identity: v1.<keyId>.<base64url(JSON {ten, tier, pri, rid, exp})>.<base64url(HMAC-SHA256)>
//
// The MAC covers "v1.<keyId>.<payload>". exp is epoch milliseconds, checked on arrival at each
// hop. Nothing is remembered, so a captured header can be replayed until it expires, though
// only with the request id it was signed for.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { ConfigError, type EnvMap } from './config.js';
import { isValidRequestId } from './headers.js';

export const IDENTITY_VERSION = 'v1';
/**
 * How long a signature holds after the edge made it. It must cover the router's retries (10 s
 * by default) and the clock skew between pods, and no more: it bounds a replay.
 */
export const IDENTITY_TTL_MS = 60_000;
/** The shortest secret accepted, in bytes: SHA-256's output size, below which a key weakens the MAC. */
export const MIN_IDENTITY_KEY_BYTES = 32;
/** The tenant of a request without a valid identity: its own prefix-cache namespace. */
export const UNVERIFIED_TENANT = 'unverified';
export const UNVERIFIED_TIER = 'unverified';
/** The engine's least urgent priority (priorities run from -100 to 100, lower first). */
export const LOWEST_PRIORITY = 100;
export const HIGHEST_PRIORITY = -100;

/** What the edge vouches for. */
export interface Identity {
  tenant: string;
  tier: string;
  /** The priority the edge granted, after clamping to the tier's range. */
  priority: number;
  requestId: string;
  /** Epoch milliseconds after which the signature is void. */
  expiresAtMs: number;
}

export interface IdentityKey {
  /** Names the key in the header, so a verifier holding several knows which one signed. */
  id: string;
  secret: Buffer;
}

export type IdentityFailure =
  | 'missing'
  | 'malformed'
  | 'unknown_key'
  | 'bad_signature'
  | 'expired'
  | 'request_id_mismatch';

export type IdentityVerification = { ok: true; identity: Identity } | { ok: false; reason: IdentityFailure };

const KEY_ID = /^[A-Za-z0-9_-]{1,32}$/;
const BASE64URL = /^[A-Za-z0-9_-]+$/;
const BASE64 = /^(?:[A-Za-z0-9+/]+={0,2}|[A-Za-z0-9_-]+={0,2})$/;
// A signed header is about 250 characters; anything far longer is not one, and is not hashed.
const MAX_HEADER_CHARS = 1024;
const MAC_BYTES = 32;

// The names the edge allows (tenants.ts), so a payload can never smuggle odd text into logs.
const payloadSchema = z.strictObject({
  ten: z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/),
  tier: z.string().regex(/^[a-z][a-z0-9_-]{0,31}$/),
  pri: z.number().int().min(HIGHEST_PRIORITY).max(LOWEST_PRIORITY),
  rid: z.string().refine(isValidRequestId),
  exp: z.number().int().positive(),
});

function mac(signed: string, secret: Buffer): Buffer {
  return createHmac('sha256', secret).update(signed, 'utf8').digest();
}

/** The x-strata-identity value for `identity`, signed with `key`. */
export function signIdentity(identity: Identity, key: IdentityKey): string {
  const payload = Buffer.from(
    JSON.stringify({
      ten: identity.tenant,
      tier: identity.tier,
      pri: identity.priority,
      rid: identity.requestId,
      exp: identity.expiresAtMs,
    }),
    'utf8',
  ).toString('base64url');
  const signed = `${IDENTITY_VERSION}.${key.id}.${payload}`;
  return `${signed}.${mac(signed, key.secret).toString('base64url')}`;
}

/**
 * Checks an x-strata-identity value against `keys` (any of them may have signed it) at `nowMs`;
 * with `requestId`, the identity must have been signed for that request. The signature is
 * checked before the payload is parsed, in constant time.
 */
export function verifyIdentity(
  header: string | undefined,
  keys: readonly IdentityKey[],
  nowMs: number,
  requestId?: string,
): IdentityVerification {
  if (header === undefined || header === '') return { ok: false, reason: 'missing' };
  if (header.length > MAX_HEADER_CHARS) return { ok: false, reason: 'malformed' };
  const parts = header.split('.');
  if (parts.length !== 4) return { ok: false, reason: 'malformed' };
  const [version, keyId, payload, signature] = parts as [string, string, string, string];
  if (
    version !== IDENTITY_VERSION ||
    !KEY_ID.test(keyId) ||
    !BASE64URL.test(payload) ||
    !BASE64URL.test(signature)
  ) {
    return { ok: false, reason: 'malformed' };
  }
  const key = keys.find((k) => k.id === keyId);
  if (key === undefined) return { ok: false, reason: 'unknown_key' };
  const expected = mac(`${version}.${keyId}.${payload}`, key.secret);
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== MAC_BYTES || !timingSafeEqual(given, expected)) {
    return { ok: false, reason: 'bad_signature' };
  }
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  } catch {
    return { ok: false, reason: 'malformed' };
  }
  const parsed = payloadSchema.safeParse(json);
  if (!parsed.success) return { ok: false, reason: 'malformed' };
  const p = parsed.data;
  if (p.exp <= nowMs) return { ok: false, reason: 'expired' };
  if (requestId !== undefined && p.rid !== requestId) return { ok: false, reason: 'request_id_mismatch' };
  return {
    ok: true,
    identity: { tenant: p.ten, tier: p.tier, priority: p.pri, requestId: p.rid, expiresAtMs: p.exp },
  };
}

/**
 * STRATA_IDENTITY_KEYS: comma-separated `id:base64secret`, the first the one the edge signs
 * with, every one accepted when verifying (rotation). Returns the keys and, instead of
 * throwing, every problem; messages never repeat a secret.
 */
export function readIdentityKeys(text: string): { keys: IdentityKey[]; problems: string[] } {
  const keys: IdentityKey[] = [];
  const problems: string[] = [];
  const entries = text
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  entries.forEach((entry, i) => {
    const where = `key ${i + 1}`;
    const colon = entry.indexOf(':');
    if (colon < 0) {
      problems.push(`${where}: expected "id:base64secret" (no ":" found)`);
      return;
    }
    const id = entry.slice(0, colon);
    const encoded = entry.slice(colon + 1);
    if (!KEY_ID.test(id)) {
      problems.push(`${where}: the id must be 1-32 of A-Z a-z 0-9 _ - (it is named in every signed header)`);
      return;
    }
    if (keys.some((k) => k.id === id)) {
      problems.push(`${where}: the id "${id}" appears twice`);
      return;
    }
    if (!BASE64.test(encoded)) {
      problems.push(`${where} ("${id}"): the secret is not base64`);
      return;
    }
    const secret = Buffer.from(
      encoded,
      encoded.includes('-') || encoded.includes('_') ? 'base64url' : 'base64',
    );
    if (secret.length < MIN_IDENTITY_KEY_BYTES) {
      problems.push(
        `${where} ("${id}"): the secret is ${secret.length} bytes; at least ${MIN_IDENTITY_KEY_BYTES} random bytes are needed (openssl rand -base64 32)`,
      );
      return;
    }
    keys.push({ id, secret });
  });
  return { keys, problems };
}

/** readIdentityKeys, throwing one ConfigError that lists every problem. */
export function parseIdentityKeys(text: string, source = 'STRATA_IDENTITY_KEYS'): IdentityKey[] {
  const { keys, problems } = readIdentityKeys(text);
  if (problems.length > 0) throw new ConfigError(source, problems);
  return keys;
}

/** A config field holding STRATA_IDENTITY_KEYS; absent or empty: no keys. */
export const identityKeysField = () =>
  z
    .string()
    .optional()
    .transform((text, ctx): IdentityKey[] => {
      if (text === undefined) return [];
      const { keys, problems } = readIdentityKeys(text);
      for (const message of problems) ctx.addIssue({ code: 'custom', message });
      return keys;
    });

/**
 * What the router and backends do with a request whose identity is missing or invalid:
 * serve it as tenant "unverified" at the lowest priority, or refuse it (401).
 */
export const identityModeSchema = z.enum(['anonymous', 'refuse']);
export type IdentityMode = z.output<typeof identityModeSchema>;

/** The router's and backends' identity settings; no keys: nothing can be verified. */
export const identityConfigSchema = z
  .object({
    keys: identityKeysField(),
    mode: identityModeSchema.default('anonymous'),
  })
  .refine((c) => c.mode !== 'refuse' || c.keys.length > 0, {
    path: ['mode'],
    message: 'refuse needs identity keys (STRATA_IDENTITY_KEYS): without them every request would be refused',
  })
  .prefault({});

export type IdentityConfig = z.output<typeof identityConfigSchema>;

export const identityEnv: EnvMap = {
  'identity.keys': 'STRATA_IDENTITY_KEYS',
  'identity.mode': 'STRATA_IDENTITY_MODE',
};
