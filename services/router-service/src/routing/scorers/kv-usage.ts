// KV cache usage: the emptier the cache, the more room for this request's blocks.
import { NEUTRAL_SCORE, type Scorer } from './types.js';

export const kvUsageScorer: Scorer<'kv'> = {
  name: 'kv',
  defaultWeight: 1,
  score: (candidates) =>
    candidates.map(({ load }) =>
      load === undefined ? NEUTRAL_SCORE : 1 - Math.min(1, Math.max(0, load.kvUsage)),
    ),
};
