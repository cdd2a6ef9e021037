// Queue depth: fewer requests in the backend (waiting + running) relative to the busiest
// backend with known load scores higher. 1 - depth / maxDepth keeps small differences small,
// unlike min-max scaling, where 4 vs 5 queued would already swing the full range.
import { NEUTRAL_SCORE, type Scorer } from './types.js';

export const queueScorer: Scorer<'queue'> = {
  name: 'queue',
  defaultWeight: 1,
  score: (candidates) => {
    let maxDepth = 0;
    for (const { load } of candidates) {
      if (load !== undefined) maxDepth = Math.max(maxDepth, load.waiting + load.running);
    }
    return candidates.map(({ load }) => {
      if (load === undefined) return NEUTRAL_SCORE;
      return maxDepth === 0 ? 1 : 1 - (load.waiting + load.running) / maxDepth;
    });
  },
};
