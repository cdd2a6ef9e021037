// STRATA_HTTP_WORKERS on the real service process (node dist/main.js, tinystories-656k): three
// event loops on one port and one engine. Connections land on more than one loop and every
// stream is whole; admission counts the requests of every loop against one capacity; /metrics
// from any loop sums all of them; SIGTERM drains every loop's streams and the process exits 0.
// Uses dist/ from the package build (the turbo test task runs after build).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { modelPath, optionalModel } from './support/models.js';
import { parseMetrics, sample } from './support/observed-backend.js';
import { ensureDist, type ServiceProcess, startService, waitFor } from './support/service-process.js';

const tiny = optionalModel('tinystories-656k');

let service: ServiceProcess | undefined;

beforeAll(() => ensureDist('inference/http-worker.js'), 60_000);
afterAll(() => service?.kill());

/** A fresh connection per request, so the kernel picks a loop for each. */
const headers = { 'content-type': 'application/json', connection: 'close' };

describe.skipIf(!tiny.path)(`STRATA_HTTP_WORKERS=3 (real process)${tiny.skipped}`, () => {
  it('serves one port and one engine from three event loops, counts and drains them as one', async () => {
    service = await startService({
      STRATA_MODEL_DIR: modelPath('tinystories-656k'),
      STRATA_HTTP_WORKERS: '3',
      STRATA_KV_CACHE_BLOCKS: '512',
      STRATA_ENGINE_THREADS: '1',
      // Room for 4 requests at once (2 running + 2 queued) across all three loops.
      STRATA_MAX_NUM_SEQS: '2',
      STRATA_MAX_QUEUED: '2',
      STRATA_DRAIN_TIMEOUT_MS: '20000',
      PORT: '0',
      HOST: '127.0.0.1',
    });
    const { proc, url, logs, exited } = service;
    const listening = () => logs.filter((l) => l.msg === 'http worker listening').length;
    await waitFor(
      'both worker threads to listen',
      async () => (listening() === 2 ? true : undefined),
      30_000,
    );
    // The main thread is ready only once its workers listen too.
    const report = await waitFor(
      "the main thread's readiness",
      async () => {
        const body = (await (await fetch(`${url}/health/ready`, { headers })).json()) as {
          ready: boolean;
          checks: Record<string, { ok: boolean; detail?: string }>;
        };
        return body.checks.http_workers ? body : undefined;
      },
      10_000,
    );
    expect(report.ready).toBe(true);
    // Said once for the process (the main thread), not once a loop.
    expect(logs.filter((l) => String(l.msg).startsWith('no identity keys'))).toHaveLength(1);
    expect(report.checks.http_workers).toEqual({ ok: true, detail: '2 of 2 listening' });

    // 4 at a time (the capacity) so that none is refused: 24 streams in all.
    const stream = (i: number, maxTokens = 8) =>
      fetch(`${url}/v1/generate`, {
        method: 'POST',
        headers,
        body: JSON.stringify({
          prompt: `Once upon a time ${i}`,
          max_tokens: maxTokens,
          ignore_eos: true,
          stream: true,
        }),
      });
    for (let round = 0; round < 6; round++) {
      const texts = await Promise.all(
        Array.from({ length: 4 }, async (_, k) => {
          const res = await stream(round * 4 + k);
          expect(res.status).toBe(200);
          return res.text();
        }),
      );
      for (const text of texts) {
        expect(text.match(/"type":"token"/g)).toHaveLength(8);
        expect(text).toContain('"finish_reason":"length"');
      }
    }
    // Log lines may come a little after the responses (a worker's stdout passes the main thread).
    const finishedLines = () => logs.filter((l) => l.msg === 'request finished' && l.warmup === undefined);
    const finished = await waitFor(
      'the request lines',
      async () => (finishedLines().length >= 24 ? finishedLines() : undefined),
      5_000,
    );
    expect(finished).toHaveLength(24);
    // Served by more than one loop (the main thread's lines carry no http_worker).
    expect(new Set(finished.map((l) => l.http_worker ?? 0)).size).toBeGreaterThan(1);

    // Every scrape, whichever loop answers it, counts all 24 and each loop's HTTP requests.
    for (let i = 0; i < 6; i++) {
      const text = await (await fetch(`${url}/metrics`, { headers })).text();
      // One sample each (sample() throws otherwise): the loops' counts summed, not listed.
      const samples = parseMetrics(text);
      expect(sample(samples, 'vllm:request_success_total', { finished_reason: 'length' })).toBe(24);
      expect(sample(samples, 'vllm:generation_tokens_total')).toBe(24 * 8);
      expect(sample(samples, 'strata_http_requests_total', { route: '/v1/generate' })).toBe(24);
      expect(text.match(/^vllm:num_requests_running\{/gm)).toHaveLength(1);
      expect(text.match(/^# TYPE process_cpu_seconds_total /gm)).toHaveLength(1);
    }

    // One capacity for all loops: of 8 long requests at once, 4 are admitted and 4 refused.
    const burst = await Promise.all(Array.from({ length: 8 }, (_, i) => stream(100 + i, 300)));
    const statuses = burst.map((res) => res.status).sort();
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429, 429, 429]);
    const load = (await (await fetch(`${url}/load`, { headers })).json()) as { live_requests: number };
    expect(load.live_requests).toBe(4);

    // SIGTERM with streams in flight on whichever loops took them: all finish, the process exits 0.
    const admitted = burst.filter((res) => res.status === 200).map((res) => res.text());
    for (const res of burst.filter((r) => r.status === 429)) await res.text();
    proc.kill('SIGTERM');
    for (const text of await Promise.all(admitted)) {
      expect(text.match(/"type":"token"/g)).toHaveLength(300);
      expect(text).toContain('"finish_reason":"length"');
    }
    expect(await exited).toBe(0);
    expect(logs.filter((l) => l.msg === 'http worker drained')).toHaveLength(2);
  }, 120_000);
});
