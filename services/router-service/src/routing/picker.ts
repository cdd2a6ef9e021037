// The picking pipeline after the filters: score -> weigh -> saturation guard -> ordered
// candidates. Pure: no I/O, no clock, nothing mutated. The scorers come in a profile (each with
// its weight), so the picker names none of them. The caller filters first (filters.ts), tries
// the candidates in order (retries walk down the list) and records the prefix for the one used.
import type { BackendState } from './backend-state.js';
import type { EligibleBackend, ExcludedBackend, FilterResult } from './filters.js';
import type { Policy, Saturation } from './rules.js';
import { SCORERS } from './scorers/index.js';
import type { ScoreInput, Scorer } from './scorers/types.js';

/** Each scorer's score, by scorer name, in profile order. */
export type ScoresByScorer = Record<string, number>;

export interface Candidate {
  backend: BackendState;
  /** Weighted mean of the scorer scores, 0..1. */
  score: number;
  scores: ScoresByScorer;
  /** Why the guard moved it to the end of the list; undefined when not saturated. */
  saturated?: Saturated;
}

/** The load figure that crossed the rule's limit. */
export interface Saturated {
  by: 'waiting' | 'kvUsage';
  value: number;
  limit: number;
}

export interface PickResult {
  /** Best first. Empty when no backend is eligible. */
  candidates: Candidate[];
  excluded: ExcludedBackend[];
  /** One line for the decision log. */
  reason: string;
}

export interface WeightedScorer {
  readonly scorer: Scorer;
  readonly weight: number;
}

/** What the picker runs for one rule: its weighted scorers and the saturation guard's limits. */
export interface PickProfile {
  scorers: readonly WeightedScorer[];
  saturation: Saturation;
}

/** A rule's policy as a profile: every enabled scorer (scorers/index.ts) with the policy's weight. */
export function profileOf(policy: Policy): PickProfile {
  return {
    scorers: SCORERS.map((scorer) => ({ scorer, weight: policy.weights[scorer.name] })),
    saturation: policy.saturation,
  };
}

export interface PickOptions extends ScoreInput {
  /**
   * Rotates the backends that tie for the best score (the caller passes a counter): at low load
   * every backend scores the same, and always taking the first by name would send all traffic
   * to one. Default 0: ties in name order.
   */
  tieBreaker?: number;
}

const TIE = 1e-9;

// The leading run of equal scores, rotated by `turn`: ties take turns instead of going to the
// same backend every time. The order of the rest is unchanged.
function rotateTies(sorted: Candidate[], turn: number): Candidate[] {
  const first = sorted[0];
  if (first === undefined) return sorted;
  let n = 1;
  while (n < sorted.length && Math.abs((sorted[n] as Candidate).score - first.score) < TIE) n++;
  const k = turn % n;
  if (k === 0) return sorted;
  return [...sorted.slice(k, n), ...sorted.slice(0, k), ...sorted.slice(n)];
}

function byScoreThenName(a: Candidate, b: Candidate): number {
  if (a.score !== b.score) return b.score - a.score;
  return a.backend.name < b.backend.name ? -1 : a.backend.name > b.backend.name ? 1 : 0;
}

const f3 = (x: number): string => x.toFixed(3);

function describe(best: Candidate, saturated: Candidate[], all: number, excluded: ExcludedBackend[]): string {
  const scores = Object.entries(best.scores).map(([name, score]) => `${name} ${f3(score)}`);
  const parts = [`${best.backend.name} score ${f3(best.score)} (${scores.join(' ')})`];
  if (saturated.length === all) parts.push('all candidates saturated');
  else if (saturated.length > 0) {
    parts.push(
      `saturated last: ${saturated.map((c) => `${c.backend.name} (${c.saturated?.by})`).join(', ')}`,
    );
  }
  if (excluded.length > 0) parts.push(`excluded: ${excluded.map((e) => `${e.name} (${e.why})`).join(', ')}`);
  return parts.join('; ');
}

export function pick(filtered: FilterResult, profile: PickProfile, options: PickOptions): PickResult {
  const { eligible, excluded } = filtered;
  if (eligible.length === 0) {
    const why = excluded.map((e) => `${e.name} (${e.why})`).join(', ');
    return { candidates: [], excluded, reason: `no eligible backend${why ? `: ${why}` : ''}` };
  }
  const columns = profile.scorers.map(({ scorer }) => scorer.score(eligible, options));
  const names = profile.scorers.map(({ scorer }) => scorer.name);
  const weights = profile.scorers.map(({ weight }) => weight);
  let totalWeight = 0;
  for (const weight of weights) totalWeight += weight;
  const { maxWaiting, maxKvUsage } = profile.saturation;
  const ready: Candidate[] = [];
  const saturated: Candidate[] = [];
  for (let i = 0; i < eligible.length; i++) {
    const { backend, load } = eligible[i] as EligibleBackend;
    // Properties added in the same order for every candidate: one hidden class for all.
    const scores: ScoresByScorer = {};
    let weighted = 0;
    for (let j = 0; j < names.length; j++) {
      const score = (columns[j] as readonly number[])[i] ?? 0;
      scores[names[j] as string] = score;
      weighted += (weights[j] as number) * score;
    }
    const candidate: Candidate = { backend, score: totalWeight === 0 ? 0 : weighted / totalWeight, scores };
    // Unknown load is never called saturated: the guard acts on evidence only.
    if (load !== undefined && load.waiting > maxWaiting) {
      candidate.saturated = { by: 'waiting', value: load.waiting, limit: maxWaiting };
    } else if (load !== undefined && load.kvUsage > maxKvUsage) {
      candidate.saturated = { by: 'kvUsage', value: load.kvUsage, limit: maxKvUsage };
    }
    (candidate.saturated === undefined ? ready : saturated).push(candidate);
  }
  ready.sort(byScoreThenName);
  saturated.sort(byScoreThenName);
  const turn = options.tieBreaker ?? 0;
  const candidates =
    ready.length > 0 ? rotateTies(ready, turn).concat(saturated) : rotateTies(saturated, turn);
  const best = candidates[0] as Candidate;
  return { candidates, excluded, reason: describe(best, saturated, candidates.length, excluded) };
}
