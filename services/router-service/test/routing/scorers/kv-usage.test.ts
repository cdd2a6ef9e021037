import { describe, expect, it } from 'vitest';
import { kvUsageScorer } from '../../../src/routing/scorers/kv-usage.js';
import { backend, eligible } from '../helpers.js';

describe('KV usage scorer', () => {
  it('scores 1 - usage, clamped, and 0.5 for unknown load', () => {
    const scores = kvUsageScorer.score(
      eligible(
        backend('a', { kvUsage: 0 }),
        backend('b', { kvUsage: 0.25 }),
        backend('c', { kvUsage: 1.5 }),
        backend('d'),
      ),
      { prefixHashes: [] },
    );
    expect(scores).toEqual([1, 0.75, 0, 0.5]);
  });
});
