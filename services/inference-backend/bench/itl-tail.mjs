// Where the tail of "ITL added per token" comes from (http-latency.mjs). At 256 streams one
// engine step is 256 tokens, so the p99 over tokens is decided by the worst one or two percent of
// the steps: a few late deliveries of whole steps (a GC pause, a busy turn of the event loop) and
// a spread of each step's tokens over a long burst of writes look the same in that one number,
// and call for different remedies. This says which: how many steps hold the tokens at or above
// the p99, how many of the worst step's tokens are among them, and how many of those steps had a
// GC pause of the serving thread during their delivery. Dependency-free, like percentile.mjs:
// the service bundle's Node runs it on a machine without the workspace.
import { percentile } from './percentile.mjs';

/**
 * tokens: one entry per token after the first of its request: `engine` (when the engine sampled
 * it, ms), `added` (client gap - engine gap, ms), `delivery` (client time - engine time, ms).
 * Tokens of one engine step share its sampling moment; moments closer than `sameStepMs` are one
 * step (worker threads place the same moment a few microseconds apart).
 * pauses: GC pauses of the serving thread, `start` and `duration` on the same clock (ms).
 */
export function itlTail(tokens, pauses = [], { p = 99, sameStepMs = 0.2 } = {}) {
  const added = tokens.map((t) => t.added);
  const threshold = percentile(added, p);
  const byTime = [...tokens].sort((a, b) => a.engine - b.engine);
  const steps = [];
  for (const t of byTime) {
    const last = steps.at(-1);
    if (last && t.engine - last.engine <= sameStepMs) last.tokens.push(t);
    else steps.push({ engine: t.engine, tokens: [t] });
  }
  const tail = steps
    .map((s) => ({ ...s, hits: s.tokens.filter((t) => t.added >= threshold).length }))
    .filter((s) => s.hits > 0);
  // A pause overlaps a step's delivery when it falls between the step's sampling and the last of
  // its tokens parsed by the client.
  const paused = tail.filter((s) => {
    const end = s.engine + Math.max(...s.tokens.map((t) => t.delivery));
    return pauses.some((g) => g.start < end && g.start + g.duration > s.engine);
  });
  const durations = pauses.map((g) => g.duration);
  return {
    p90: percentile(added, 90),
    p99: threshold,
    p999: percentile(added, 99.9),
    max: percentile(added, 100),
    steps: steps.length,
    tail_tokens: tail.reduce((n, s) => n + s.hits, 0),
    tail_steps: tail.length,
    worst_step_tail_tokens: tail.reduce((n, s) => Math.max(n, s.hits), 0),
    tail_steps_with_gc: paused.length,
    gc: {
      pauses: pauses.length,
      total_ms: durations.reduce((a, b) => a + b, 0),
      max_ms: durations.length ? Math.max(...durations) : 0,
    },
  };
}

/** One line for the table: the tail's percentiles and where it lies. */
export function tailLine(t) {
  const ms = (v) => v.toFixed(3);
  return (
    `p90 ${ms(t.p90)}, p99 ${ms(t.p99)}, p99.9 ${ms(t.p999)}, max ${ms(t.max)}; the ${t.tail_tokens} tokens at or above ` +
    `p99 lie in ${t.tail_steps} of ${t.steps} steps (the worst holds ${t.worst_step_tail_tokens}), ` +
    `${t.tail_steps_with_gc} of those steps with a GC pause; GC: ${t.gc.pauses} pauses, ${ms(t.gc.total_ms)} ms, ` +
    `the longest ${ms(t.gc.max_ms)} ms`
  );
}
