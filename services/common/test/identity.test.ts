// The signed identity (identity.ts): sign/verify, every field covered by the MAC, key rotation,
// expiry, request-id binding, malformed headers, the key list's parser and config fields, and
// the guard the router and backends run.
import { createHmac, randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, loadConfig } from '../src/config.js';
import {
  type Identity,
  type IdentityKey,
  identityConfigSchema,
  identityEnv,
  parseIdentityKeys,
  readIdentityKeys,
  signIdentity,
  verifyIdentity,
} from '../src/identity.js';
import { registerIdentityGuard, requestIdentity } from '../src/identity-guard.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { createServiceApp } from '../src/service.js';
import { identityHeaders, testIdentityKey } from '../src/testing/identity.js';

const NOW = 1_700_000_000_000;
const key = (id: string): IdentityKey => ({ id, secret: randomBytes(32) });
const identity: Identity = {
  tenant: 'acme',
  tier: 'premium',
  priority: -50,
  requestId: 'req-1',
  expiresAtMs: NOW + 60_000,
};

/** Re-encodes the payload of a signed header with `change` applied, keeping the old signature. */
function tamper(header: string, change: (payload: Record<string, unknown>) => void): string {
  const [v, id, payload, mac] = header.split('.') as [string, string, string, string];
  const json = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  change(json);
  return [v, id, Buffer.from(JSON.stringify(json)).toString('base64url'), mac].join('.');
}

/** A header whose payload is `raw` text, correctly signed with `k` (a buggy or hostile signer). */
function signRaw(raw: string, k: IdentityKey): string {
  const signed = `v1.${k.id}.${Buffer.from(raw).toString('base64url')}`;
  return `${signed}.${createHmac('sha256', k.secret).update(signed).digest('base64url')}`;
}

describe('signIdentity / verifyIdentity', () => {
  const k1 = key('k1');

  it('round-trips every field and has the documented shape', () => {
    const header = signIdentity(identity, k1);
    expect(header).toMatch(/^v1\.k1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
    const payload = JSON.parse(Buffer.from(header.split('.')[2] as string, 'base64url').toString('utf8'));
    expect(payload).toEqual({ ten: 'acme', tier: 'premium', pri: -50, rid: 'req-1', exp: NOW + 60_000 });
    expect(verifyIdentity(header, [k1], NOW, 'req-1')).toEqual({ ok: true, identity });
    // Without a request id to compare, the signature and expiry still decide.
    expect(verifyIdentity(header, [k1], NOW)).toEqual({ ok: true, identity });
  });

  it.each([
    ['tenant', (p: Record<string, unknown>) => (p.ten = 'globex')],
    ['tier', (p: Record<string, unknown>) => (p.tier = 'free')],
    ['priority', (p: Record<string, unknown>) => (p.pri = -100)],
    ['request id', (p: Record<string, unknown>) => (p.rid = 'req-2')],
    ['expiry', (p: Record<string, unknown>) => (p.exp = NOW + 3_600_000)],
  ])('refuses a header whose %s was changed after signing', (_field, change) => {
    const forged = tamper(signIdentity(identity, k1), change);
    expect(verifyIdentity(forged, [k1], NOW)).toEqual({ ok: false, reason: 'bad_signature' });
  });

  it('refuses a changed signature, another secret under the same id, and an unknown key id', () => {
    const header = signIdentity(identity, k1);
    const mac = header.split('.')[3] as string;
    const flipped = `${header.slice(0, -mac.length)}${mac[0] === 'A' ? 'B' : 'A'}${mac.slice(1)}`;
    expect(verifyIdentity(flipped, [k1], NOW)).toEqual({ ok: false, reason: 'bad_signature' });
    expect(verifyIdentity(`${header.slice(0, -mac.length)}${mac.slice(0, 20)}`, [k1], NOW)).toEqual({
      ok: false,
      reason: 'bad_signature',
    });
    expect(verifyIdentity(header, [key('k1')], NOW)).toEqual({ ok: false, reason: 'bad_signature' });
    expect(verifyIdentity(header, [key('k2')], NOW)).toEqual({ ok: false, reason: 'unknown_key' });
    // Naming another key the verifier holds does not help: the MAC covers the key id too.
    const k2 = key('k2');
    const renamed = header.replace(/^v1\.k1\./, 'v1.k2.');
    expect(verifyIdentity(renamed, [k1, k2], NOW)).toEqual({ ok: false, reason: 'bad_signature' });
    expect(verifyIdentity(header, [], NOW)).toEqual({ ok: false, reason: 'unknown_key' });
  });

  it('accepts the current and the previous key during a rotation, and only those', () => {
    const previous = key('old');
    const current = key('new');
    const byPrevious = signIdentity(identity, previous);
    const byCurrent = signIdentity(identity, current);
    // Step 1: the new key is added second (still signing with the old); step 2: swapped.
    for (const keys of [
      [previous, current],
      [current, previous],
    ]) {
      expect(verifyIdentity(byPrevious, keys, NOW).ok).toBe(true);
      expect(verifyIdentity(byCurrent, keys, NOW).ok).toBe(true);
    }
    // Step 3: the old key is dropped.
    expect(verifyIdentity(byPrevious, [current], NOW)).toEqual({ ok: false, reason: 'unknown_key' });
    expect(verifyIdentity(byCurrent, [current], NOW).ok).toBe(true);
  });

  it('refuses an expired identity, from the expiry on', () => {
    const header = signIdentity(identity, k1);
    expect(verifyIdentity(header, [k1], identity.expiresAtMs - 1).ok).toBe(true);
    expect(verifyIdentity(header, [k1], identity.expiresAtMs)).toEqual({ ok: false, reason: 'expired' });
  });

  it('refuses an identity signed for another request id', () => {
    expect(verifyIdentity(signIdentity(identity, k1), [k1], NOW, 'req-2')).toEqual({
      ok: false,
      reason: 'request_id_mismatch',
    });
  });

  it('says missing or malformed for everything that is not a signed header', () => {
    const header = signIdentity(identity, k1);
    expect(verifyIdentity(undefined, [k1], NOW)).toEqual({ ok: false, reason: 'missing' });
    expect(verifyIdentity('', [k1], NOW)).toEqual({ ok: false, reason: 'missing' });
    const malformed = [
      'garbage',
      'v1.k1.e30',
      `${header}.extra`,
      header.replace(/^v1/, 'v2'),
      header.replace(/^v1\.k1/, 'v1.k 1'),
      header.replace(/^v1\.k1\./, 'v1.k1.+'),
      `${header}=`,
      `v1.k1.${'A'.repeat(2000)}.sig`,
      // Correctly signed, but not an identity: not JSON, wrong types, out of range, extra keys.
      signRaw('not json', k1),
      signRaw(JSON.stringify({ ten: 'acme' }), k1),
      signRaw(JSON.stringify({ ten: 'acme', tier: 'free', pri: 1000, rid: 'r', exp: NOW + 1 }), k1),
      signRaw(JSON.stringify({ ten: 'ACME\n', tier: 'free', pri: 0, rid: 'r', exp: NOW + 1 }), k1),
      signRaw(JSON.stringify({ ten: 'acme', tier: 'free', pri: 0, rid: 'r', exp: NOW + 1, x: 1 }), k1),
    ];
    for (const value of malformed) {
      expect(verifyIdentity(value, [k1], NOW), value.slice(0, 60)).toEqual({
        ok: false,
        reason: 'malformed',
      });
    }
  });
});

describe('STRATA_IDENTITY_KEYS', () => {
  const secret = randomBytes(32).toString('base64');
  const urlSecret = randomBytes(40).toString('base64url');

  it('parses id:base64 pairs in order, the first being the signing key', () => {
    const keys = parseIdentityKeys(` new:${secret} , old:${urlSecret},`);
    expect(keys.map((k) => k.id)).toEqual(['new', 'old']);
    expect(keys[0]?.secret.toString('base64')).toBe(secret);
    expect(keys[1]?.secret.length).toBe(40);
    expect(parseIdentityKeys('')).toEqual([]);
  });

  it('names every bad entry without repeating a secret', () => {
    const short = randomBytes(16).toString('base64');
    const { keys, problems } = readIdentityKeys(
      [
        `nocolon${secret}`,
        `bad.id:${secret}`,
        `a:${secret}`,
        `a:${secret}`,
        'b:not base64!',
        `c:${short}`,
      ].join(','),
    );
    expect(keys.map((k) => k.id)).toEqual(['a']);
    expect(problems).toEqual([
      'key 1: expected "id:base64secret" (no ":" found)',
      'key 2: the id must be 1-32 of A-Z a-z 0-9 _ - (it is named in every signed header)',
      'key 4: the id "a" appears twice',
      'key 5 ("b"): the secret is not base64',
      'key 6 ("c"): the secret is 16 bytes; at least 32 random bytes are needed (openssl rand -base64 32)',
    ]);
    for (const p of problems) expect(p).not.toContain(secret.slice(0, 12));
    expect(() => parseIdentityKeys(`c:${short}`)).toThrow(ConfigError);
  });

  it('is a config field: bad keys and refuse without keys fail with the variable named', () => {
    const schema = z.object({ identity: identityConfigSchema });
    const load = (env: Record<string, string>) => loadConfig({ schema, envMap: identityEnv, env });
    expect(load({}).identity).toEqual({ keys: [], mode: 'anonymous' });
    const ok = load({ STRATA_IDENTITY_KEYS: `k1:${secret}`, STRATA_IDENTITY_MODE: 'refuse' }).identity;
    expect([ok.mode, ok.keys.map((k) => k.id)]).toEqual(['refuse', ['k1']]);
    expect(() => load({ STRATA_IDENTITY_KEYS: 'k1:abc' })).toThrow(
      /identity\.keys \(env STRATA_IDENTITY_KEYS\): key 1 \("k1"\): the secret is 2 bytes/,
    );
    expect(() => load({ STRATA_IDENTITY_MODE: 'refuse' })).toThrow(
      /identity\.mode \(env STRATA_IDENTITY_MODE\): refuse needs identity keys/,
    );
    expect(() => load({ STRATA_IDENTITY_MODE: 'trust' })).toThrow(/identity\.mode/);
  });
});

describe('the identity guard', () => {
  function build(mode: 'anonymous' | 'refuse', keys: IdentityKey[]) {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger({
      service: 'guarded',
      destination: new Writable({
        write(chunk, _e, done) {
          lines.push(JSON.parse(String(chunk)));
          done();
        },
      }),
    });
    const metrics = createMetrics('guarded', { defaultMetrics: false });
    const app = createServiceApp({ name: 'guarded', logger, metrics });
    app.register(async (scope) => {
      registerIdentityGuard(scope, {
        keys,
        mode,
        registry: metrics.registry,
        metricName: 'strata_test_identity_total',
      });
      scope.get('/who', async (request) => requestIdentity(request));
    });
    const count = async (result: string) => {
      const text = await metrics.registry.metrics();
      const m = new RegExp(`^strata_test_identity_total\\{result="${result}"[^}]*\\} (\\d+)$`, 'm').exec(
        text,
      );
      return Number(m?.[1] ?? 0);
    };
    return { app, lines, count };
  }

  it('gives a verified request its tenant and priority; the rest are "unverified" at 100, logged once per interval', async () => {
    const k = testIdentityKey();
    const { app, lines, count } = build('anonymous', [k]);
    const signed = await app.inject({
      url: '/who',
      headers: identityHeaders(k, { tenant: 'acme', tier: 'premium', priority: -50 }),
    });
    expect(signed.json()).toEqual({ tenant: 'acme', tier: 'premium', priority: -50, result: 'verified' });
    for (let i = 0; i < 3; i++) {
      const forged = await app.inject({
        url: '/who',
        headers: { 'x-strata-tenant': 'acme', 'x-strata-priority': '-100' },
      });
      expect(forged.json()).toEqual({
        tenant: 'unverified',
        tier: 'unverified',
        priority: 100,
        result: 'missing',
      });
    }
    const other = testIdentityKey();
    const wrongKey = await app.inject({ url: '/who', headers: identityHeaders({ ...other, id: k.id }) });
    expect(wrongKey.json().result).toBe('bad_signature');
    expect([await count('verified'), await count('missing'), await count('bad_signature')]).toEqual([
      1, 3, 1,
    ]);
    const warned = lines.filter((l) => l.level === 'warn');
    // One line per reason within the interval, saying why and who the caller claimed to be.
    expect(warned.map((l) => l.identity)).toEqual(['missing', 'bad_signature']);
    expect(warned[0]).toMatchObject({ mode: 'anonymous', claimed_tenant: 'acme' });
  });

  it('refuses with 401 STRATA_IDENTITY_INVALID in refuse mode', async () => {
    const k = testIdentityKey();
    const { app, count } = build('refuse', [k]);
    const res = await app.inject({ url: '/who', headers: { 'x-strata-tenant': 'acme' } });
    expect(res.statusCode).toBe(401);
    expect(res.json().error).toEqual({
      code: 'STRATA_IDENTITY_INVALID',
      type: 'auth',
      message:
        'Refused: it carries no x-strata-identity header. Requests reach this service through the edge.',
    });
    const expired = await app.inject({
      url: '/who',
      headers: identityHeaders(k, { expiresAtMs: Date.now() - 1 }),
    });
    expect(expired.json().error.message).toContain('has expired');
    const ok = await app.inject({ url: '/who', headers: identityHeaders(k) });
    expect(ok.statusCode).toBe(200);
    expect(await count('expired')).toBe(1);
  });

  it('without keys verifies nothing: every request is "unverified", counted as no_keys', async () => {
    const k = testIdentityKey();
    const { app, lines, count } = build('anonymous', []);
    const res = await app.inject({ url: '/who', headers: identityHeaders(k) });
    expect(res.json()).toEqual({
      tenant: 'unverified',
      tier: 'unverified',
      priority: 100,
      result: 'no_keys',
    });
    expect(await count('no_keys')).toBe(1);
    expect(lines.some((l) => l.level === 'warn' && String(l.msg).includes('no identity keys'))).toBe(true);
  });
});
