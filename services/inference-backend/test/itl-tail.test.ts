// bench/itl-tail.mjs: the breakdown http-latency.mjs prints under its table. It must group a
// step's tokens (the same sampling moment, a few microseconds apart across threads), find the
// steps that hold the p99 tail, and count a GC pause only when it falls inside a tail step's
// delivery.
import { describe, expect, it } from 'vitest';
import { itlTail, type TailToken, tailLine } from '../bench/itl-tail.mjs';

/** `n` tokens of one step sampled at `engine`, each `added` late and delivered `delivery` after it. */
const step = (engine: number, n: number, added: (i: number) => number, delivery = 1): TailToken[] =>
  Array.from({ length: n }, (_, i) => ({ engine: engine + (i % 3) * 0.004, added: added(i), delivery }));

describe('itlTail', () => {
  // 20 steps of 20 tokens every 10 ms: step 4 late as a whole by 8 ms (a paused loop), delivered
  // within 9 ms; two tokens of step 7 late by 9 ms; the rest under 0.2 ms.
  const tokens = Array.from({ length: 20 }, (_, s) =>
    step(s * 10, 20, (i) => (s === 4 ? 8 : s === 7 && i < 2 ? 9 : i / 100), s === 4 ? 9 : 1),
  ).flat();

  it('finds the steps that hold the tail and how much of it the worst one holds', () => {
    const t = itlTail(tokens);
    expect(t.steps).toBe(20);
    // Nearest rank over 400 tokens: the 396th smallest is one of step 4's twenty 8s.
    expect(t.p99).toBe(8);
    expect(t.tail_tokens).toBe(22);
    expect(t.tail_steps).toBe(2);
    expect(t.worst_step_tail_tokens).toBe(20);
    expect(t.p999).toBe(9);
    expect(t.max).toBe(9);
    expect(t.p90).toBeLessThan(0.2);
    expect(t.gc).toEqual({ pauses: 0, total_ms: 0, max_ms: 0 });

    const narrow = itlTail(tokens, [], { p: 99.9 });
    expect(narrow).toMatchObject({ p99: 9, tail_tokens: 2, tail_steps: 1, worst_step_tail_tokens: 2 });
  });

  it('counts a GC pause only for a tail step whose delivery it overlaps', () => {
    const pauses = [
      { start: 70.5, duration: 2 }, // inside step 7's delivery (70 .. 71)
      { start: 41.5, duration: 3 }, // inside step 4's (40 .. 49)
      { start: 90, duration: 0.5 }, // step 9's: not in the tail
    ];
    const t = itlTail(tokens, pauses);
    expect(t.tail_steps_with_gc).toBe(2);
    expect(t.gc).toEqual({ pauses: 3, total_ms: 5.5, max_ms: 3 });
    expect(itlTail(tokens, pauses, { p: 99.9 }).tail_steps_with_gc).toBe(1);
    expect(itlTail(tokens, pauses.slice(1), { p: 99.9 }).tail_steps_with_gc).toBe(0);
    // Ending before step 7's sampling, or starting after its last token was read: no overlap.
    expect(itlTail(tokens, [{ start: 68, duration: 1.9 }]).tail_steps_with_gc).toBe(0);
    expect(itlTail(tokens, [{ start: 71.1, duration: 1 }]).tail_steps_with_gc).toBe(0);
  });

  it('keeps steps apart that are further apart than sameStepMs', () => {
    expect(itlTail(tokens, [], { sameStepMs: 0.001 }).steps).toBe(60); // each step's three moments are 4 µs apart
  });

  it('reads as one line', () => {
    expect(tailLine(itlTail(tokens, [{ start: 70.5, duration: 2 }]))).toBe(
      `p90 ${itlTail(tokens).p90.toFixed(3)}, p99 8.000, p99.9 9.000, max 9.000; the 22 tokens at or above p99 lie ` +
        'in 2 of 20 steps (the worst holds 20), 1 of those steps with a GC pause; GC: 1 pauses, 2.000 ms, the longest 2.000 ms',
    );
  });
});
