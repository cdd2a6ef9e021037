import { describe, expect, it } from 'vitest';
import { prefixScorer } from '../../../src/routing/scorers/prefix.js';
import { PrefixIndex } from '../../../src/routing/scorers/prefix-index.js';
import { backend, eligible } from '../helpers.js';

describe('prefix scorer', () => {
  const candidates = eligible(backend('a'), backend('b'), backend('c'));
  const index = new PrefixIndex({ blockChars: 8, maxBlocks: 4 });
  const shared = 's'.repeat(24);
  index.record(index.hashes(`${shared}${'1'.repeat(8)}`), 'a');
  index.record(index.hashes(shared.slice(0, 8)), 'b');

  it('scores the share of leading blocks each backend served; the longest chain wins', () => {
    const prefixHashes = index.hashes(`${shared}${'2'.repeat(8)}`);
    expect(prefixScorer.score(candidates, { prefixHashes, prefixIndex: index })).toEqual([0.75, 0.25, 0]);
  });

  it('scores 0 everywhere without an index or a whole block', () => {
    const prefixHashes = index.hashes(shared);
    expect(prefixScorer.score(candidates, { prefixHashes })).toEqual([0, 0, 0]);
    expect(prefixScorer.score(candidates, { prefixHashes: [], prefixIndex: index })).toEqual([0, 0, 0]);
  });
});
