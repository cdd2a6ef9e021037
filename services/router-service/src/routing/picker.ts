// The picking pipeline: filter -> score -> weigh -> saturation guard -> ordered candidates.
// Pure: no I/O, no clock (the caller passes `now`), nothing mutated. The caller tries the
// candidates in order (retries walk down the list) and records the prefix for the one used.
import type { BackendState } from './backend-state.js';
import { type EligibleBackend, type ExcludedBackend, filterBackends } from './filters.js';
import type { Policy, Weights } from './rules.js';
import { kvUsageScorer } from './scorers/kv-usage.js';
import { prefixScorer } from './scorers/prefix.js';
import { queueScorer } from './scorers/queue.js';
import { sessionScorer } from './scorers/session.js';
import type { ScoreInput, ScorerName } from './scorers/types.js';

export type ScoresByScorer = Record<ScorerName, number>;

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

export interface PickOptions extends ScoreInput {
  /** ms since the epoch, as in BackendLoad.at. */
  now: number;
  loadMaxAgeMs?: number;
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

function weightedScore(scores: ScoresByScorer, weights: Weights): number {
  const total = weights.queue + weights.kv + weights.prefix + weights.session;
  if (total === 0) return 0;
  return (
    (weights.queue * scores.queue +
      weights.kv * scores.kv +
      weights.prefix * scores.prefix +
      weights.session * scores.session) /
    total
  );
}

function byScoreThenName(a: Candidate, b: Candidate): number {
  if (a.score !== b.score) return b.score - a.score;
  return a.backend.name < b.backend.name ? -1 : a.backend.name > b.backend.name ? 1 : 0;
}

const f3 = (x: number): string => x.toFixed(3);

function describe(best: Candidate, saturated: Candidate[], all: number, excluded: ExcludedBackend[]): string {
  const s = best.scores;
  const parts = [
    `${best.backend.name} score ${f3(best.score)} (queue ${f3(s.queue)} kv ${f3(s.kv)} prefix ${f3(s.prefix)} session ${f3(s.session)})`,
  ];
  if (saturated.length === all) parts.push('all candidates saturated');
  else if (saturated.length > 0) {
    parts.push(
      `saturated last: ${saturated.map((c) => `${c.backend.name} (${c.saturated?.by})`).join(', ')}`,
    );
  }
  if (excluded.length > 0) parts.push(`excluded: ${excluded.map((e) => `${e.name} (${e.why})`).join(', ')}`);
  return parts.join('; ');
}

export function pick(backends: readonly BackendState[], policy: Policy, options: PickOptions): PickResult {
  const { eligible, excluded } = filterBackends(backends, options.now, options.loadMaxAgeMs);
  if (eligible.length === 0) {
    const why = excluded.map((e) => `${e.name} (${e.why})`).join(', ');
    return { candidates: [], excluded, reason: `no eligible backend${why ? `: ${why}` : ''}` };
  }
  const queue = queueScorer(eligible, options);
  const kv = kvUsageScorer(eligible, options);
  const prefix = prefixScorer(eligible, options);
  const session = sessionScorer(eligible, options);
  const { maxWaiting, maxKvUsage } = policy.saturation;
  const ready: Candidate[] = [];
  const saturated: Candidate[] = [];
  for (let i = 0; i < eligible.length; i++) {
    const { backend, load } = eligible[i] as EligibleBackend;
    const scores = { queue: queue[i] ?? 0, kv: kv[i] ?? 0, prefix: prefix[i] ?? 0, session: session[i] ?? 0 };
    const candidate: Candidate = { backend, score: weightedScore(scores, policy.weights), scores };
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
