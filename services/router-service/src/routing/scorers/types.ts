// A scorer rates every eligible backend for one request in [0,1], higher = better, as an array
// aligned with the candidates. Scorers are pure: they read their inputs and change nothing.
// Each lives in its own file; index.ts lists the ones the picker runs, and a rule's policy
// weighs them by name (as llm-d's scheduler profiles hold weighted Scorer plugins).
import type { EligibleBackend } from '../filters.js';
import type { PrefixIndex } from './prefix-index.js';

/** Score given to a backend whose load is unknown or stale: neither favoured nor avoided. */
export const NEUTRAL_SCORE = 0.5;

export interface ScoreInput {
  /** Chain hashes of the prompt's leading blocks (see prefixHashes); empty when not computed. */
  prefixHashes: readonly number[];
  /** Where recent prefixes went; absent disables prefix affinity. */
  prefixIndex?: PrefixIndex;
  /** The backend the session store holds for this request's session, if any. */
  sessionBackend?: string;
}

export interface Scorer<Name extends string = string> {
  /** Its key in a rule's `policy.weights` and in the decision log's per-scorer scores. */
  readonly name: Name;
  /** Its weight in a rule that sets none. */
  readonly defaultWeight: number;
  score(candidates: readonly EligibleBackend[], input: ScoreInput): number[];
}
