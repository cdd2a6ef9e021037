import { describe, expect, it } from 'vitest';
import { filterBackends } from '../../src/routing/filters.js';
import { pick, profileOf } from '../../src/routing/picker.js';
import { queueScorer } from '../../src/routing/scorers/queue.js';
import type { Scorer } from '../../src/routing/scorers/types.js';
import { backend, NOW, pickAmong, policy } from './helpers.js';

const at = { now: NOW, prefixHashes: [] };
const names = (r: ReturnType<typeof pickAmong>) => r.candidates.map((c) => c.backend.name);

describe('picker', () => {
  it('orders by weighted score, ties by name, with per-scorer scores', () => {
    const result = pickAmong(
      [
        backend('c', { waiting: 2, running: 2, kvUsage: 0.5 }),
        backend('b', { waiting: 0, running: 0, kvUsage: 0.5 }),
        backend('a', { waiting: 0, running: 0, kvUsage: 0.5 }),
      ],
      policy({ weights: { queue: 1, kv: 1, prefix: 0, session: 0 } }),
      at,
    );
    expect(names(result)).toEqual(['a', 'b', 'c']);
    expect(result.candidates[0]?.score).toBe(0.75);
    expect(result.candidates[2]?.score).toBe(0.25);
    expect(result.candidates[2]?.scores).toEqual({ queue: 0, kv: 0.5, prefix: 0, session: 0 });
    expect(result.reason).toBe('a score 0.750 (queue 1.000 kv 0.500 prefix 0.000 session 0.000)');
  });

  it('takes turns among backends tied for the best score, leaving the rest in order', () => {
    const backends = [
      backend('c', { waiting: 2, running: 2, kvUsage: 0.5 }),
      backend('b', { waiting: 0, running: 0, kvUsage: 0.5 }),
      backend('a', { waiting: 0, running: 0, kvUsage: 0.5 }),
    ];
    const order = (turn: number) =>
      names(
        pickAmong(backends, policy({ weights: { queue: 1, kv: 1, prefix: 0, session: 0 } }), {
          ...at,
          tieBreaker: turn,
        }),
      );
    expect([0, 1, 2, 3].map(order)).toEqual([
      ['a', 'b', 'c'],
      ['b', 'a', 'c'],
      ['a', 'b', 'c'],
      ['b', 'a', 'c'],
    ]);
  });

  it('follows the session when weights favour it, and load when they do not', () => {
    const backends = [backend('a', { running: 1 }), backend('b', { running: 4 })];
    const session = { ...at, sessionBackend: 'b' };
    expect(
      names(pickAmong(backends, policy({ weights: { queue: 1, kv: 0, prefix: 0, session: 3 } }), session)),
    ).toEqual(['b', 'a']);
    expect(
      names(pickAmong(backends, policy({ weights: { queue: 4, kv: 0, prefix: 0, session: 3 } }), session)),
    ).toEqual(['a', 'b']);
  });

  it('never lists a not-ready or ejected backend, however well it would score', () => {
    const result = pickAmong(
      [
        backend('busy', { waiting: 10, running: 10 }),
        backend('idle-not-ready', {}, { ready: false }),
        backend('idle-ejected', {}, { healthy: false }),
      ],
      policy(),
      { ...at, sessionBackend: 'idle-not-ready' },
    );
    expect(names(result)).toEqual(['busy']);
    expect(result.reason).toContain('excluded: idle-not-ready (not ready), idle-ejected (ejected)');
  });

  it('returns no candidates and says why when nothing is eligible', () => {
    const result = pickAmong([backend('a', {}, { ready: false })], policy(), at);
    expect(result).toEqual({
      candidates: [],
      excluded: [{ name: 'a', why: 'not ready' }],
      reason: 'no eligible backend: a (not ready)',
    });
    expect(pickAmong([], policy(), at).reason).toBe('no eligible backend');
  });

  it('moves saturated backends to the end even when affinity points at them', () => {
    const result = pickAmong(
      [
        backend('sticky', { waiting: 9, kvUsage: 0.2 }),
        backend('full', { waiting: 0, kvUsage: 0.95 }),
        backend('free', { waiting: 2, kvUsage: 0.5 }),
      ],
      policy({ weights: { session: 10 }, saturation: { maxWaiting: 8, maxKvUsage: 0.9 } }),
      { ...at, sessionBackend: 'sticky' },
    );
    expect(names(result)).toEqual(['free', 'sticky', 'full']);
    expect(result.candidates.map((c) => c.saturated)).toEqual([
      undefined,
      { by: 'waiting', value: 9, limit: 8 },
      { by: 'kvUsage', value: 0.95, limit: 0.9 },
    ]);
    expect(result.candidates[1]?.score).toBeGreaterThan(result.candidates[0]?.score ?? 1);
    expect(result.reason).toContain('saturated last: sticky (waiting), full (kvUsage)');
  });

  it('keeps score order when every backend is saturated', () => {
    const result = pickAmong(
      [backend('a', { waiting: 50 }), backend('b', { waiting: 40 })],
      policy({ weights: { queue: 1, kv: 0, prefix: 0, session: 0.1 }, saturation: { maxWaiting: 8 } }),
      { ...at, sessionBackend: 'a' },
    );
    expect(names(result)).toEqual(['b', 'a']);
    expect(result.reason).toContain('all candidates saturated');
    const sticky = pickAmong(
      [backend('a', { waiting: 50 }), backend('b', { waiting: 40 })],
      policy({ weights: { queue: 1, kv: 0, prefix: 0, session: 3 }, saturation: { maxWaiting: 8 } }),
      { ...at, sessionBackend: 'a' },
    );
    expect(names(sticky)).toEqual(['a', 'b']);
  });

  it('scores stale load neutrally and never calls it saturated', () => {
    const result = pickAmong(
      [
        backend('stale', { waiting: 99, kvUsage: 0.99, at: NOW - 1000 }),
        backend('known', { waiting: 4, running: 0, kvUsage: 0.6 }),
      ],
      policy({ weights: { queue: 1, kv: 1, prefix: 0, session: 0 }, saturation: { maxWaiting: 8 } }),
      at,
    );
    expect(result.candidates.map((c) => [c.backend.name, c.scores.queue, c.scores.kv, c.saturated])).toEqual([
      ['stale', 0.5, 0.5, undefined],
      ['known', 0, 0.4, undefined],
    ]);
    // With a longer freshness window the same load counts, and the guard acts on it.
    const fresh = pickAmong(
      [backend('stale', { waiting: 99, at: NOW - 1000 }), backend('known', { waiting: 4 })],
      policy({ saturation: { maxWaiting: 8 } }),
      { ...at, loadMaxAgeMs: 2000 },
    );
    expect(names(fresh)).toEqual(['known', 'stale']);
    expect(fresh.candidates[1]?.saturated).toEqual({ by: 'waiting', value: 99, limit: 8 });
  });

  it('weighs every enabled scorer with the policy weight of its name', () => {
    const profile = profileOf(policy({ weights: { queue: 4, session: 0 } }));
    expect(profile.scorers.map(({ scorer, weight }) => [scorer.name, weight])).toEqual([
      ['queue', 4],
      ['kv', 1],
      ['prefix', 2],
      ['session', 0],
    ]);
  });

  it('runs whatever scorers its profile holds: a new scorer needs no change here', () => {
    const lastLetter: Scorer = {
      name: 'lastLetter',
      defaultWeight: 1,
      score: (candidates) => candidates.map(({ backend }) => (backend.name === 'z' ? 1 : 0)),
    };
    const result = pick(
      filterBackends([backend('a', {}), backend('z', {})], NOW, 250),
      {
        scorers: [
          { scorer: lastLetter, weight: 2 },
          { scorer: queueScorer, weight: 1 },
        ],
        saturation: policy().saturation,
      },
      at,
    );
    expect(result.candidates.map((c) => [c.backend.name, c.score, c.scores])).toEqual([
      ['z', 1, { lastLetter: 1, queue: 1 }],
      ['a', 1 / 3, { lastLetter: 0, queue: 1 }],
    ]);
    expect(result.reason).toBe('z score 1.000 (lastLetter 1.000 queue 1.000)');
  });
});
