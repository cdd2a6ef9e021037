import { describe, expect, it } from 'vitest';
import { sessionScorer } from '../../../src/routing/scorers/session.js';
import { backend, eligible } from '../helpers.js';

describe('session scorer', () => {
  const candidates = eligible(backend('a'), backend('b'), backend('c'));

  it('scores 1 for the backend the session store named, 0 for the rest', () => {
    expect(sessionScorer.score(candidates, { prefixHashes: [], sessionBackend: 'b' })).toEqual([0, 1, 0]);
  });

  it('scores 0 everywhere without a session or when its backend is gone', () => {
    expect(sessionScorer.score(candidates, { prefixHashes: [] })).toEqual([0, 0, 0]);
    expect(sessionScorer.score(candidates, { prefixHashes: [], sessionBackend: 'gone' })).toEqual([0, 0, 0]);
  });
});
