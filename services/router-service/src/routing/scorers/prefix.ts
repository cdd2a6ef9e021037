// Prefix affinity: the share of the request's leading blocks that a backend served recently.
// The backend holding the longest matching chain scores highest; no index or no whole block
// gives every backend 0, which changes no order.
import type { Scorer } from './types.js';

export const prefixScorer: Scorer<'prefix'> = {
  name: 'prefix',
  defaultWeight: 2,
  score: (candidates, { prefixHashes, prefixIndex }) => {
    if (prefixIndex === undefined || prefixHashes.length === 0) return candidates.map(() => 0);
    const matched = prefixIndex.matchedBlocks(prefixHashes);
    return candidates.map(({ backend }) => (matched.get(backend.name) ?? 0) / prefixHashes.length);
  },
};
