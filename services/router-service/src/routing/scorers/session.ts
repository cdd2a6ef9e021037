// Session affinity: the backend the session store remembers for x-session-id scores 1.
// The store itself (Redis or in-memory) lives in src/affinity/; its answer arrives as input.
import type { Scorer } from './types.js';

export const sessionScorer: Scorer<'session'> = {
  name: 'session',
  defaultWeight: 3,
  score: (candidates, { sessionBackend }) =>
    candidates.map(({ backend }) =>
      sessionBackend !== undefined && backend.name === sessionBackend ? 1 : 0,
    ),
};
