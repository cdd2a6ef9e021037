// SIGTERM on the real service process (node dist/main.js): readiness drops at once, a stream in
// flight still finishes with done, and the process exits 0. Uses dist/ from the package build
// (the turbo test task runs after build); builds it here only when it is missing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { modelPath, optionalModel } from './support/models.js';
import { ensureDist, type ServiceProcess, startService, waitFor } from './support/service-process.js';

const tiny = optionalModel('tinystories-656k');

let service: ServiceProcess | undefined;

beforeAll(() => ensureDist(), 60_000);
afterAll(() => service?.kill());

describe.skipIf(!tiny.path)(`SIGTERM drain (real process)${tiny.skipped}`, () => {
  it('turns not ready, finishes the in-flight stream with done, and exits 0', async () => {
    service = await startService({
      STRATA_MODEL_DIR: modelPath('tinystories-656k'),
      STRATA_KV_CACHE_BLOCKS: '512',
      STRATA_ENGINE_THREADS: '1',
      STRATA_MAX_NUM_SEQS: '1',
      STRATA_DRAIN_TIMEOUT_MS: '20000',
      PORT: '0',
      HOST: '127.0.0.1',
    });
    const { proc, url, logs, exited } = service;
    await waitFor(
      '/health/ready 200',
      async () => ((await fetch(`${url}/health/ready`)).status === 200 ? true : undefined),
      20_000,
    );

    // One sequence at a time (STRATA_MAX_NUM_SEQS=1): 12 streams of 450 tokens go first, so the
    // 300-token stream under test is admitted (200, headers sent) and still in flight, queued
    // then decoding, for a good while after SIGTERM; the drain must wait for all of them.
    const open = (maxTokens: number, prompt: string) =>
      fetch(`${url}/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt, max_tokens: maxTokens, ignore_eos: true, stream: true }),
      });
    const ahead = await Promise.all(
      Array.from({ length: 12 }, (_, i) => open(450, `Once upon a time there was a dog number ${i}`)),
    );
    const main = await open(300, 'Once upon a time');
    for (const res of [...ahead, main]) expect(res.status).toBe(200);
    let doneAt = Number.POSITIVE_INFINITY;
    const mainText = main.text().then((text) => {
      doneAt = performance.now();
      return text;
    });
    const aheadTexts = Promise.all(ahead.map((res) => res.text()));
    proc.kill('SIGTERM');

    // Not ready for new work: 503 from readiness, or the listener is already closed.
    const readiness = await waitFor(
      'readiness to drop',
      async () => {
        try {
          const res = await fetch(`${url}/health/ready`, { headers: { connection: 'close' } });
          return res.status === 503 ? 'not ready (503)' : undefined;
        } catch {
          return 'connection refused';
        }
      },
      5_000,
    );
    const notReadyAt = performance.now();
    expect(['not ready (503)', 'connection refused']).toContain(readiness);

    const events = (await mainText)
      .split('\n\n')
      .map((frame) => frame.split('\n').find((line) => line.startsWith('data: ')))
      .filter((line): line is string => line !== undefined)
      .map((line) => JSON.parse(line.slice(6)) as Record<string, unknown>);
    // The stream was still running when the service had already stopped being ready.
    expect(doneAt).toBeGreaterThan(notReadyAt);
    expect(events.at(-1)).toMatchObject({
      type: 'done',
      finish_reason: 'length',
      usage: { output_tokens: 300 },
    });
    expect(events.filter((e) => e.type === 'token')).toHaveLength(300);
    for (const text of await aheadTexts) expect(text).toContain('"finish_reason":"length"');

    const code = await Promise.race([
      exited,
      new Promise<'hung'>((r) => setTimeout(() => r('hung'), 20_000)),
    ]);
    expect(code).toBe(0);
    // The drain began while the stream was running, and ended drained.
    expect(logs.some((l) => l.msg === 'shutdown: draining')).toBe(true);
    expect(logs.find((l) => l.msg === 'shutdown: done')).toMatchObject({ outcome: 'drained' });
  }, 60_000);
});
