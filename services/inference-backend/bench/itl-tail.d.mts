export interface TailToken {
  /** When the engine sampled the token, ms. */
  engine: number;
  /** Client gap - engine gap, ms. */
  added: number;
  /** Client time - engine time, ms. */
  delivery: number;
}
export interface GcPause {
  start: number;
  duration: number;
}
export interface ItlTail {
  p90: number;
  p99: number;
  p999: number;
  max: number;
  steps: number;
  tail_tokens: number;
  tail_steps: number;
  worst_step_tail_tokens: number;
  tail_steps_with_gc: number;
  gc: { pauses: number; total_ms: number; max_ms: number };
}
/** Where the tokens at or above the p-th percentile of `added` lie: how many steps, how many with a GC pause. */
export function itlTail(
  tokens: TailToken[],
  pauses?: GcPause[],
  options?: { p?: number; sameStepMs?: number },
): ItlTail;
/** One line for the benchmark's table. */
export function tailLine(tail: ItlTail): string;
