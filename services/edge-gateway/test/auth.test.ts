import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, StrataError } from '@strata/common';
import { describe, expect, it } from 'vitest';
import { ANONYMOUS, authenticate, hashKey } from '../src/auth/authenticate.js';
import { parseTenantsYaml } from '../src/auth/tenants.js';

const sha = (key: string) => `sha256:${createHash('sha256').update(key).digest('hex')}`;
const TENANTS = `
tenants:
  - name: acme
    keys: ["${sha('key-acme-1')}", "${sha('key-acme-2')}"]
    requests_per_minute: 10
  - name: globex
    keys: ["${sha('key-globex')}"]
    tokens_per_minute: 0
`;

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
    expect(keys.map((k) => [k.digest.toString('hex'), k.tenant])).toEqual([
      [sha('key-acme-1').slice(7), { name: 'acme', requestsPerMinute: 10, tokensPerMinute: undefined }],
      [sha('key-acme-2').slice(7), { name: 'acme', requestsPerMinute: 10, tokensPerMinute: undefined }],
      [sha('key-globex').slice(7), { name: 'globex', requestsPerMinute: undefined, tokensPerMinute: 0 }],
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
    expect(() => parseTenantsYaml('tenant: []', 'x')).toThrow(/Unrecognized key/);
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
});
