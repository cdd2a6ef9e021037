// An event-loop stall as a client sees it: GET a URL every 10 ms, each after the last answer,
// and keep the longest time between two answers. The prompt-stall benchmark and the prompt-size
// test run it in a worker thread, so that their own thread's work does not read as the stall.

/** Polls `url` until `stopped()`; resolves how many answers came and the longest gap (ms). */
export async function probeGaps(url, stopped) {
  let last = performance.now();
  let maxGapMs = 0;
  let answers = 0;
  while (!stopped()) {
    const res = await fetch(url);
    await res.arrayBuffer();
    const now = performance.now();
    maxGapMs = Math.max(maxGapMs, now - last);
    last = now;
    answers++;
    await new Promise((r) => setTimeout(r, 10));
  }
  return { answers, maxGapMs: Math.round(maxGapMs) };
}
