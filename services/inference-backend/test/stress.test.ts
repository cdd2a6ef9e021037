// Load on a real backend (port 0, real engine, tinystories-656k): many concurrent streams stay
// separate and complete, and overload answers only 200 or 429 with memory bounded.

import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storyPrompt } from '../bench/story-prompts.mjs';
import { json, readSse, startBackend, type TestBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');

const post = (url: string, body: unknown) =>
  fetch(`${url}/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** A distinct prompt per stream index. */
const promptFor = storyPrompt;

describe.skipIf(!tiny.path)(`200 concurrent streams${tiny.skipped}`, () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await startBackend({
      STRATA_WARMUP: 'false',
      STRATA_MAX_NUM_SEQS: '256',
      STRATA_MAX_QUEUED: '256',
    });
  });
  afterAll(() => backend.close());

  it('each ends with exactly one terminal event, none lost, none mixed', async () => {
    const STREAMS = 200;
    const MAX_TOKENS = 24;
    const params = { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true };
    // Solo runs first, one at a time: the reference token ids for each prompt.
    const solo: number[][] = [];
    for (let i = 0; i < STREAMS; i++) {
      const out = await backend.host.get().generator.complete({ prompt: promptFor(i), params });
      solo.push(out.tokenIds);
    }
    expect(new Set(solo.map((ids) => ids.join(','))).size).toBeGreaterThan(STREAMS / 2);

    const results = await Promise.all(
      Array.from({ length: STREAMS }, async (_, i) => {
        const res = await post(backend.url, {
          prompt: promptFor(i),
          max_tokens: MAX_TOKENS,
          temperature: 0,
          ignore_eos: true,
          stream: true,
        });
        return { status: res.status, events: res.status === 200 ? await readSse(res) : [await json(res)] };
      }),
    );
    let completed = 0;
    for (const [i, { status, events }] of results.entries()) {
      expect(status, `stream ${i}`).toBe(200);
      const terminal = events.filter((e) => e.type === 'done' || e.type === 'error');
      expect(terminal, `stream ${i} terminal events`).toHaveLength(1);
      expect(events.at(-1), `stream ${i} ends with its terminal event`).toBe(terminal[0]);
      const tokens = events.filter((e) => e.type === 'token');
      expect(tokens.length + 1, `stream ${i} has only token events before the end`).toBe(events.length);
      expect(tokens.map((e) => e.index)).toEqual(Array.from({ length: tokens.length }, (_, k) => k));
      const end = terminal[0] as { type: string; finish_reason?: string; usage?: { output_tokens: number } };
      if (end.type === 'error') continue; // a clear error is allowed; a lost or mixed stream is not
      completed++;
      expect(end.finish_reason).toBe('length');
      expect(end.usage?.output_tokens).toBe(tokens.length);
      expect(
        tokens.map((e) => e.id),
        `stream ${i} equals its solo run`,
      ).toEqual(solo[i]);
    }
    expect(completed).toBe(STREAMS);
    expect(backend.host.get().liveRequests).toBe(0);
  }, 60_000);
});

/** The test process's heap after a full collection (the backend runs in this process). */
function collect(): void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
}

describe.skipIf(!tiny.path)(`overload at several times capacity${tiny.skipped}`, () => {
  let backend: TestBackend;
  // Capacity 8 (4 running + 4 queued); bursts of 100 simultaneous requests.
  beforeAll(async () => {
    backend = await startBackend({
      STRATA_WARMUP: 'false',
      STRATA_MAX_NUM_SEQS: '4',
      STRATA_MAX_QUEUED: '4',
    });
  });
  afterAll(() => backend.close());

  const burst = async (round: number) =>
    Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const res = await post(backend.url, {
          prompt: promptFor(round * 100 + i),
          max_tokens: 32,
          temperature: 0,
          ignore_eos: true,
          stream: i % 2 === 0,
        });
        if (res.status !== 200)
          return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await json(res) };
        if (i % 2 === 0) {
          const events = await readSse(res);
          return { status: 200, retryAfter: null, body: events.at(-1) };
        }
        return { status: 200, retryAfter: null, body: await json(res) };
      }),
    );

  it('answers only 200 or 429 with Retry-After, completes the 200s, stays healthy, memory bounded', async () => {
    const ROUNDS = 5;
    // Heap growth bound: measured after the first burst (warm: JIT, pools, buffers) and after
    // the last; a leak of even ~100 KB per request would exceed it over 400 requests.
    const HEAP_GROWTH_BOUND = 16 * 1024 * 1024;
    const RSS_GROWTH_BOUND = 64 * 1024 * 1024;
    let before = process.memoryUsage();
    let accepted = 0;
    let rejected = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const results = await burst(round);
      for (const r of results) {
        expect([200, 429]).toContain(r.status);
        if (r.status === 429) {
          rejected++;
          expect(Number(r.retryAfter)).toBeGreaterThan(0);
          expect(r.body.error.code).toBe('STRATA_QUEUE_FULL');
        } else {
          accepted++;
          // JSON responses have finish_reason; SSE ends with a done event.
          expect(r.body.finish_reason).toBe('length');
          expect(r.body.usage.output_tokens).toBe(32);
        }
      }
      if (round === 0) {
        collect();
        before = process.memoryUsage();
      }
    }
    collect();
    const after = process.memoryUsage();
    const heapGrowth = after.heapUsed - before.heapUsed;
    const rssGrowth = after.rss - before.rss;
    console.info(
      `overload: ${accepted} accepted, ${rejected} rejected (429) over ${ROUNDS} bursts of 100; ` +
        `heap growth ${(heapGrowth / 1048576).toFixed(1)} MiB, rss growth ${(rssGrowth / 1048576).toFixed(1)} MiB`,
    );
    expect(accepted).toBeGreaterThanOrEqual(8 * ROUNDS);
    expect(rejected).toBeGreaterThan(0);
    expect(heapGrowth).toBeLessThan(HEAP_GROWTH_BOUND);
    expect(rssGrowth).toBeLessThan(RSS_GROWTH_BOUND);

    // Healthy after: idle engine, ready, and a normal request succeeds.
    for (let i = 0; i < 100 && (backend.host.get().engine.stats().kvBlocksUsed ?? 0) > 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(backend.host.get().liveRequests).toBe(0);
    expect(backend.host.get().engine.stats().kvBlocksUsed).toBe(0);
    expect((await fetch(`${backend.url}/health/ready`)).status).toBe(200);
    const res = await post(backend.url, { prompt: 'Once upon a time', max_tokens: 8 });
    expect(res.status).toBe(200);
    expect((await json(res)).usage.output_tokens).toBeGreaterThan(0);
  }, 60_000);
});
