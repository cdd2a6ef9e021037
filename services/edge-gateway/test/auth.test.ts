import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, parseIdentityKeys, StrataError } from '@strata/common';
import { describe, expect, it } from 'vitest';
import { ANONYMOUS, authenticate, hashKey } from '../src/auth/authenticate.js';
import { parseTenantsYaml } from '../src/auth/tenants.js';
import { DEFAULT_TIERS, grantPriority, priorityHeader } from '../src/auth/tiers.js';

const sha = (key: string) => `sha256:${createHash('sha256').update(key).digest('hex')}`;
const TENANTS = `
tenants:
  - name: acme
    keys: ["${sha('key-acme-1')}", "${sha('key-acme-2')}"]
    requests_per_minute: 10
  - name: globex
    keys: ["${sha('key-globex')}"]
    tokens_per_minute: 0
    tier: free
`;
const standard = DEFAULT_TIERS.standard;
const free = DEFAULT_TIERS.free;

function rejection(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (err) {
    if (err instanceof StrataError) return { code: err.code, message: err.message };
    throw err;
  }
  throw new Error('expected a rejection');
}

describe('tenants file', () => {
  it('maps every key hash to its tenant and limits', () => {
    const keys = parseTenantsYaml(TENANTS, 'test');
    const acme = { name: 'acme', requestsPerMinute: 10, tokensPerMinute: undefined, tier: standard };
    expect(keys.map((k) => [k.digest.toString('hex'), k.tenant])).toEqual([
      [sha('key-acme-1').slice(7), acme],
      [sha('key-acme-2').slice(7), acme],
      [
        sha('key-globex').slice(7),
        { name: 'globex', requestsPerMinute: undefined, tokensPerMinute: 0, tier: free },
      ],
    ]);
  });

  it('names every problem of a bad file', () => {
    const bad = `
tenants:
  - name: Acme Corp
    keys: ["md5:abc"]
  - name: dup
    keys: ["${sha('a')}"]
  - name: dup
    keys: ["${sha('a')}"]
    requests_per_minute: -1
`;
    let error: ConfigError | undefined;
    try {
      parseTenantsYaml(bad, 'file t.yaml');
    } catch (err) {
      error = err as ConfigError;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(error?.problems).toEqual([
      'tenants.0.name: a tenant name is 1-63 of a-z 0-9 . _ -',
      'tenants.0.keys.0: a key must be "sha256:" followed by 64 lowercase hex digits',
      'tenants.2.requests_per_minute: Too small: expected number to be >=0',
      'tenants.2.name: duplicate tenant "dup"',
      'tenants.2.keys.0: this key hash is already given to tenant "dup"',
    ]);
    expect(() => parseTenantsYaml('tenants: [', 'x')).toThrow(/not valid YAML/);
    // The router and backends serve requests without a valid identity as "unverified".
    expect(() => parseTenantsYaml(`tenants: [{name: unverified, keys: ["${sha('u')}"]}]`, 'x')).toThrow(
      /tenants\.0\.name: "unverified" is reserved/,
    );
    expect(() => parseTenantsYaml('tenant: []', 'x')).toThrow(/Unrecognized key/);
  });
});

describe('tiers', () => {
  it('keep every premium priority ahead of every standard one, and standard ahead of free', () => {
    const { premium } = DEFAULT_TIERS;
    expect([premium, standard, free].map((t) => [t?.min, t?.max, t?.default])).toEqual([
      [-100, -1, -50],
      [0, 49, 0],
      [50, 100, 75],
    ]);
  });

  it('clamp what a request asks to its tier, and give the default when it asks for nothing', () => {
    expect(grantPriority(free, -100)).toBe(50);
    expect(grantPriority(free, 90)).toBe(90);
    expect(grantPriority(free, undefined)).toBe(75);
    expect(grantPriority(standard, 100)).toBe(49);
    expect(priorityHeader('-7')).toBe(-7);
    expect(priorityHeader(['3', '4'])).toBe(3);
    expect([priorityHeader('high'), priorityHeader('1.5'), priorityHeader(undefined)]).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
  });

  it('are set per tenant, and the table may be overridden and extended in the tenants file', () => {
    const keys = parseTenantsYaml(
      `
tiers:
  free: { min: 80, max: 100, default: 90 }
  gold: { min: -100, max: -90, default: -95 }
tenants:
  - { name: a, keys: ["${sha('a')}"], tier: gold }
  - { name: b, keys: ["${sha('b')}"], tier: free }
  - { name: c, keys: ["${sha('c')}"], tier: premium }
`,
      'x',
    );
    expect(keys.map((k) => k.tenant.tier)).toEqual([
      { name: 'gold', min: -100, max: -90, default: -95 },
      { name: 'free', min: 80, max: 100, default: 90 },
      DEFAULT_TIERS.premium,
    ]);
  });

  it('are validated: ranges, defaults inside them, known names only', () => {
    let error: ConfigError | undefined;
    try {
      parseTenantsYaml(
        `
tiers:
  free: { min: 50, max: 200, default: 75 }
  odd: { min: 10, max: 0, default: 5 }
  Bad: { min: 0, max: 0, default: 0 }
  unverified: { min: 0, max: 0, default: 0 }
tenants:
  - { name: a, keys: ["${sha('a')}"], tier: gold }
`,
        'file t.yaml',
      );
    } catch (err) {
      error = err as ConfigError;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(error?.problems).toEqual([
      'tiers.free.max: Too big: expected number to be <=100',
      'tiers.odd: a tier needs min <= default <= max',
      'tiers.Bad: a tier name is 1-32 of a-z 0-9 _ -, starting with a letter',
      'tiers.unverified: "unverified" is reserved for requests without a valid identity',
      'tenants.0.tier: unknown tier "gold"; the tiers are premium, standard, free, odd, Bad, unverified',
    ]);
    expect(() => parseTenantsYaml('tiers: { short: { min: 0, max: 1 } }\ntenants: []', 'x')).toThrow(
      /tiers\.short\.default: Invalid input: expected number/,
    );
  });
});

describe('authenticate', () => {
  const keys = parseTenantsYaml(TENANTS, 'test');

  it('resolves a Bearer key to its tenant', () => {
    expect(authenticate('Bearer key-acme-2', keys).name).toBe('acme');
    expect(authenticate('bearer   key-globex', keys).name).toBe('globex');
  });

  it('answers 401 saying only what to send', () => {
    const missing = {
      code: 'STRATA_UNAUTHORIZED',
      message: 'Send an API key as "Authorization: Bearer <key>".',
    };
    const invalid = { code: 'STRATA_UNAUTHORIZED', message: 'The API key is not valid.' };
    expect(rejection(() => authenticate(undefined, keys))).toEqual(missing);
    expect(rejection(() => authenticate('Basic a2V5', keys))).toEqual(missing);
    expect(rejection(() => authenticate('Bearer ', keys))).toEqual(missing);
    expect(rejection(() => authenticate('Bearer key-acme-3', keys))).toEqual(invalid);
    expect(rejection(() => authenticate(`Bearer ${sha('key-acme-1')}`, keys))).toEqual(invalid);
  });

  it('is off without a tenants file: every request is anonymous', () => {
    expect(authenticate(undefined, undefined)).toBe(ANONYMOUS);
    expect(authenticate('Bearer whatever', undefined)).toBe(ANONYMOUS);
  });
});

describe('strata-edge-key', () => {
  const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'cli', 'edge-key.js');

  it('makes a key whose printed hash authenticates it', () => {
    const out = execFileSync(process.execPath, [cli, 'new'], { encoding: 'utf8' });
    const [, key, hash] = /^key: {2}(\S+)\nhash: (sha256:[0-9a-f]{64})\n$/.exec(out) ?? [];
    expect(hash).toBe(hashKey(key as string));
    const keys = parseTenantsYaml(`tenants:\n  - name: t\n    keys: ["${hash}"]\n`, 'x');
    expect(authenticate(`Bearer ${key}`, keys).name).toBe('t');
    expect(execFileSync(process.execPath, [cli, 'hash', 'abc'], { encoding: 'utf8' })).toBe(
      `${sha('abc')}\n`,
    );
    expect(execFileSync(process.execPath, [cli, 'hash'], { input: 'abc\n', encoding: 'utf8' })).toBe(
      `${sha('abc')}\n`,
    );
  });

  it('makes an identity key that STRATA_IDENTITY_KEYS accepts', () => {
    const line = execFileSync(process.execPath, [cli, 'identity', 'k2'], { encoding: 'utf8' }).trim();
    expect(parseIdentityKeys(line).map((k) => [k.id, k.secret.length])).toEqual([['k2', 32]]);
  });
});
