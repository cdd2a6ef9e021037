// A backend killed mid-stream, and a sidecar killed: every accepted request ends with a terminal
// event, the survivor keeps serving, no KV block leaks and nothing else crashes.
import { describe, expect, it } from 'vitest';
import type { Harness } from '../src/harness.js';
import { send } from './support/client.js';
import { useHarness } from './support/harness.js';
import { harnessModel } from './support/models.js';
import { expectAllAlive, expectNoLeakedBlocks } from './support/platform-checks.js';

const model = harnessModel();

const harness = useHarness();

// Long streams: 400 tokens that ignore the end-of-story token, so they are still running when
// the backend dies (one compute thread per backend).
const LONG = { max_tokens: 400, ignore_eos: true };

describe.skipIf(!model.path)(`a backend killed mid-stream${model.skipped}`, () => {
  it('ends its streams with an error event, and the other backend takes the traffic', async () => {
    // Streams spread over both backends; wait until every one has its first token.
    const streams = 12;
    const backendOf: (string | null)[] = [];
    const finished: boolean[] = [];
    let started = 0;
    let allStarted: () => void = () => {};
    const everyFirstToken = new Promise<void>((resolve) => {
      allStarted = resolve;
    });
    const pending = Array.from({ length: streams }, (_, i) => {
      let first = true;
      return send(harness().entryUrl, harness().apiKey, {
        body: LONG,
        session: `kill-${i}`,
        onHeaders: (backend) => {
          backendOf[i] = backend;
        },
        onEvent: (event) => {
          if (first && ++started === streams) allStarted();
          first = false;
          const e = event as { type?: string };
          if (e.type === 'done' || e.type === 'error') finished[i] = true;
        },
      });
    });
    await everyFirstToken;
    // The backend serving the most streams dies. SIGSTOP first, and a pause for bytes already
    // sent to arrive: the streams still open then are certainly cut in the middle.
    const count = (label: string) => backendOf.filter((b) => b === label).length;
    const [victim, survivor] = [...harness().backends].sort((a, b) => count(b.label) - count(a.label)) as [
      Harness['backends'][0],
      Harness['backends'][0],
    ];
    victim.freeze();
    await new Promise((r) => setTimeout(r, 300));
    const cut = backendOf.flatMap((b, i) => (b === victim.label && !finished[i] ? [i] : []));
    expect(cut.length).toBeGreaterThan(0);
    await victim.kill('SIGKILL');

    const outcomes = await Promise.all(pending);
    // Every accepted request ended: done, or a clear error event naming the upstream failure.
    for (const o of outcomes) {
      expect(o.status).toBe(200);
      expect(o.networkError).toBeUndefined();
      expect(o.terminal).toBeDefined();
    }
    expect(cut.map((i) => [outcomes[i]?.terminal, outcomes[i]?.errorCode])).toEqual(
      cut.map(() => ['error', 'STRATA_UPSTREAM_ERROR']),
    );
    const rest = outcomes.filter((_, i) => !cut.includes(i));
    expect(rest.map((o) => o.terminal)).toEqual(rest.map(() => 'done'));

    // New requests all go to the survivor (the router retries a refused connection before the
    // first byte and ejects the dead backend).
    const after = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        send(harness().entryUrl, harness().apiKey, { session: `kill-${i}` }),
      ),
    );
    expect(after.map((o) => [o.status, o.terminal, o.backend])).toEqual(
      after.map(() => [200, 'done', survivor.label]),
    );
    await expectNoLeakedBlocks(harness());
    await expectAllAlive(harness());
  }, 120_000);

  it('serves on both backends again once the killed one is back', async () => {
    const killed = harness().backends.findIndex((b) => !b.running);
    await harness().restartBackend(killed);
    const seen = new Set<string | null>();
    // The router may still hold the restarted backend ejected (its backoff doubles up to 10 s
    // while the backend was down), so this keeps sending for up to 30 s; distinct prompts keep
    // prefix-cache affinity from pinning every request to the survivor.
    const deadline = Date.now() + 30_000;
    for (let i = 0; Date.now() < deadline && seen.size < 2; i++) {
      const batch = await Promise.all(
        Array.from({ length: 4 }, (_, j) =>
          send(harness().entryUrl, harness().apiKey, {
            body: { prompt: `Story ${i}.${j}: a cat`, max_tokens: 8 },
          }),
        ),
      );
      for (const o of batch) {
        expect([o.status, o.terminal], JSON.stringify(o)).toEqual([200, 'done']);
        seen.add(o.backend);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    expect([...seen].sort()).toEqual(
      harness()
        .backends.map((b) => b.label)
        .sort(),
    );
    await expectNoLeakedBlocks(harness());
    await expectAllAlive(harness());
  }, 120_000);
});

describe.skipIf(!model.path)(`a sidecar killed${model.skipped}`, () => {
  it('leaves inference untouched, and a restarted sidecar answers again', async () => {
    const [sidecar] = harness().sidecars;
    if (!sidecar) throw new Error('no sidecar');
    await sidecar.kill('SIGKILL');
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        send(harness().entryUrl, harness().apiKey, {
          stream: i % 2 === 0,
          endpoint: i % 4 < 2 ? 'generate' : 'completions',
        }),
      ),
    );
    expect(outcomes.map((o) => [o.status, o.terminal])).toEqual(outcomes.map(() => [200, 'done']));
    await sidecar.start();
    const live = await fetch(`${sidecar.url}/health/live`);
    expect(live.status).toBe(200);
    await expectNoLeakedBlocks(harness());
    await expectAllAlive(harness());
  }, 120_000);
});
