import { describe, expect, it } from 'vitest';
import { queueScorer } from '../../../src/routing/scorers/queue.js';
import { backend, eligible } from '../helpers.js';

const none = { prefixHashes: [] };

describe('queue scorer', () => {
  it('scores 1 - (waiting + running) / busiest', () => {
    const scores = queueScorer.score(
      eligible(
        backend('a', { waiting: 0, running: 2 }),
        backend('b', { waiting: 6, running: 2 }),
        backend('c'),
      ),
      none,
    );
    expect(scores).toEqual([0.75, 0, 0.5]);
  });

  it('gives every idle backend 1 and unknown load a neutral 0.5', () => {
    expect(queueScorer.score(eligible(backend('a', {}), backend('b', {})), none)).toEqual([1, 1]);
    expect(queueScorer.score(eligible(backend('a', { waiting: 4 }), backend('b')), none)).toEqual([0, 0.5]);
  });
});
