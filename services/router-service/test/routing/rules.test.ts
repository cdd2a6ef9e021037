import { ConfigError } from '@strata/common';
import { describe, expect, it } from 'vitest';
import {
  matchRule,
  parseRoutingConfig,
  parseRoutingYaml,
  type RouteRequest,
} from '../../src/routing/rules.js';

const YAML = `
pools:
  chat:
    backends:
      - { name: chat-0, url: "http://127.0.0.1:9000" }
  code: { backends: [{ name: code-0, url: "http://127.0.0.1:9100" }] }
  bulk: {}
rules:
  - name: acme-canary
    match: { tenant: acme, headers: { X-Canary: "1" } }
    pool: code
  - name: coder
    match: { model: [qwen-coder, deepseek-coder] }
    pool: code
    policy: { weights: { queue: 1, kv: 0, prefix: 5, session: 0 }, saturation: { maxWaiting: 8, maxKvUsage: 0.8 } }
  - name: batch
    match: { priority: { max: -1 } }
    pool: bulk
  - name: long-prompts
    match: { promptChars: { min: 8000 } }
    pool: bulk
  - name: acme
    match: { tenant: acme }
    pool: chat
default:
  pool: chat
`;

const config = parseRoutingYaml(YAML, 'test');
const req = (r: Partial<RouteRequest>): RouteRequest => ({ headers: {}, promptChars: 10, ...r });
const ruleFor = (r: Partial<RouteRequest>) => matchRule(config.rules, req(r)).name;

describe('routing rules', () => {
  it('keeps the file order and appends the default rule with default policy', () => {
    expect(config.rules.map((r) => r.name)).toEqual([
      'acme-canary',
      'coder',
      'batch',
      'long-prompts',
      'acme',
      'default',
    ]);
    expect(config.rules[5]).toEqual({
      name: 'default',
      match: {},
      pool: 'chat',
      policy: {
        weights: { queue: 1, kv: 1, prefix: 2, session: 3 },
        saturation: { maxWaiting: 32, maxKvUsage: 0.9 },
      },
    });
    expect(config.rules[1]?.policy).toEqual({
      weights: { queue: 1, kv: 0, prefix: 5, session: 0 },
      saturation: { maxWaiting: 8, maxKvUsage: 0.8 },
    });
    expect(config.pools.bulk).toEqual({ backends: [] });
  });

  it('matches by model (any of a list)', () => {
    expect(ruleFor({ model: 'deepseek-coder' })).toBe('coder');
    expect(ruleFor({ model: 'qwen-coder' })).toBe('coder');
    expect(ruleFor({ model: 'llama' })).toBe('default');
  });

  it('matches by tenant and exact header values, header names case-insensitive', () => {
    expect(ruleFor({ tenant: 'acme', headers: { 'x-canary': '1' } })).toBe('acme-canary');
    expect(ruleFor({ tenant: 'acme', headers: { 'x-canary': ['0', '1'] } })).toBe('acme-canary');
    expect(ruleFor({ tenant: 'acme', headers: { 'x-canary': '10' } })).toBe('acme');
    expect(ruleFor({ tenant: 'other', headers: { 'x-canary': '1' } })).toBe('default');
    expect(ruleFor({ headers: { 'x-canary': '1' } })).toBe('default');
  });

  it('matches priority ranges inclusively and never a request without priority', () => {
    expect(ruleFor({ priority: -1 })).toBe('batch');
    expect(ruleFor({ priority: -5 })).toBe('batch');
    expect(ruleFor({ priority: 0 })).toBe('default');
    expect(ruleFor({})).toBe('default');
  });

  it('matches prompt size', () => {
    expect(ruleFor({ promptChars: 7999 })).toBe('default');
    expect(ruleFor({ promptChars: 8000 })).toBe('long-prompts');
  });

  it('takes the first match in file order', () => {
    // coder (2nd) beats acme (5th); batch (3rd) beats long-prompts (4th).
    expect(ruleFor({ tenant: 'acme', model: 'qwen-coder' })).toBe('coder');
    expect(ruleFor({ priority: -2, promptChars: 9000, tenant: 'acme' })).toBe('batch');
    expect(ruleFor({ tenant: 'acme', promptChars: 9000 })).toBe('long-prompts');
  });

  it('rejects a bad file with one error listing every problem', () => {
    const bad = {
      pools: {
        chat: {
          backends: [
            { name: 'a', url: 'http://a:1' },
            { name: 'a', url: 'http://b:1' },
          ],
        },
      },
      rules: [
        { name: 'x', pool: 'missing' },
        { name: 'x', pool: 'chat' },
        { name: 'default', pool: 'chat' },
      ],
      default: { pool: 'nowhere' },
    };
    let error: unknown;
    try {
      parseRoutingConfig(bad, 'file r.yaml');
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      'pools.chat.backends.1.name: duplicate backend "a"',
      'rules.0.pool: unknown pool "missing"',
      'rules.1.name: duplicate rule name "x"',
      'rules.2.name: "default" is reserved for the default rule',
      'default.pool: unknown pool "nowhere"',
    ]);
    expect((error as ConfigError).message).toMatch(/^invalid configuration \(file r\.yaml\): 5 problems\n/);
  });

  it('reports schema problems with their paths', () => {
    let error: unknown;
    try {
      parseRoutingConfig(
        {
          pools: { p: { backends: [{ name: 'b', url: 'not a url' }] } },
          rules: [
            {
              name: 'r',
              pool: 'p',
              match: { promptChars: { min: 10, max: 5 }, size: 3 },
              policy: { weights: { queue: -1 }, saturation: { maxKvUsage: 2 } },
            },
          ],
        },
        'test',
      );
    } catch (err) {
      error = err;
    }
    const paths = (error as ConfigError).problems.map((p) => p.slice(0, p.indexOf(':')));
    expect(paths).toEqual([
      'pools.p.backends.0.url',
      'rules.0.match.promptChars',
      'rules.0.match',
      'rules.0.policy.weights.queue',
      'rules.0.policy.saturation.maxKvUsage',
      'default',
    ]);
  });

  it('rejects all-zero weights and invalid YAML', () => {
    expect(() =>
      parseRoutingConfig(
        {
          pools: { p: {} },
          default: { pool: 'p', policy: { weights: { queue: 0, kv: 0, prefix: 0, session: 0 } } },
        },
        'test',
      ),
    ).toThrow('default.policy.weights: at least one weight must be > 0');
    expect(() => parseRoutingYaml('pools: [', 'test')).toThrow(/not valid YAML/);
  });

  it('takes a weight for each enabled scorer by name, and no other', () => {
    expect(() =>
      parseRoutingConfig(
        { pools: { p: {} }, default: { pool: 'p', policy: { weights: { latency: 1 } } } },
        'test',
      ),
    ).toThrow(/default\.policy\.weights: Unrecognized key: "latency"/);
  });
});
