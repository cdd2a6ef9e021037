// End to end through the picker: requests sharing a long prefix land on the same backend,
// until that backend saturates; then they go elsewhere and the new backend gains affinity.
import { describe, expect, it } from 'vitest';
import type { BackendState } from '../../src/routing/backend-state.js';
import { PrefixIndex } from '../../src/routing/scorers/prefix-index.js';
import { backend, NOW, pickAmong, policy } from './helpers.js';

const rule = policy({
  weights: { queue: 1, kv: 1, prefix: 3, session: 0 },
  saturation: { maxWaiting: 4, maxKvUsage: 0.9 },
});
const system = 'You are a careful assistant. '.repeat(40); // 1,160 chars: 4 whole 256-char blocks

describe('prefix-aware routing', () => {
  it('sends requests sharing a long prefix to the same backend unless it is saturated', () => {
    const index = new PrefixIndex();
    const pool: BackendState[] = ['b0', 'b1', 'b2', 'b3'].map((n) => backend(n, { waiting: 0, running: 1 }));
    const route = (prompt: string, backends: BackendState[]) => {
      const prefixHashes = index.hashes(prompt);
      const chosen = pickAmong(backends, rule, { now: NOW, prefixHashes, prefixIndex: index }).candidates[0];
      if (chosen === undefined) throw new Error('no candidate');
      index.record(prefixHashes, chosen.backend.name);
      return chosen;
    };

    // First request: equal load, no affinity yet, ties go by name.
    expect(route(`${system}Question 0?`, pool).backend.name).toBe('b0');
    // The same system prompt keeps going to b0 although it is now the busiest backend.
    const busier = pool.map((b) => (b.name === 'b0' ? backend('b0', { waiting: 3, running: 4 }) : b));
    for (let i = 1; i <= 5; i++) {
      const chosen = route(`${system}Question ${i}?`, busier);
      expect(chosen.backend.name).toBe('b0');
      expect(chosen.scores.prefix).toBe(1);
    }
    // A different prefix is free to go elsewhere.
    expect(route(`${'Translate to French. '.repeat(30)}Hello`, busier).backend.name).toBe('b1');

    // b0 saturates: the shared prefix moves to the next best backend, which then holds it.
    // (b1 is now busier than b2 and b3: it took the French request.)
    const saturated = [
      backend('b0', { waiting: 5, running: 4 }),
      backend('b1', { waiting: 1, running: 1 }),
      backend('b2', { waiting: 0, running: 1 }),
      backend('b3', { waiting: 0, running: 1 }),
    ];
    const moved = pickAmong(saturated, rule, {
      now: NOW,
      prefixHashes: index.hashes(system),
      prefixIndex: index,
    });
    expect(moved.candidates.map((c) => c.backend.name)).toEqual(['b2', 'b3', 'b1', 'b0']);
    expect(route(`${system}Question 6?`, saturated).backend.name).toBe('b2');
    expect(route(`${system}Question 7?`, busier).backend.name).toBe('b2');
  });
});
