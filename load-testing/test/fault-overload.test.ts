// Overload at ten times capacity for 30 s, then recovery; and slow clients that read one byte at
// a time. Capacity is set by admission, not by machine speed: each backend runs at most 4
// sequences and queues 4 more (16 in flight over two backends), so 160 clients that always
// have a request open are ten times what the platform admits. Warmup is off here: its batch of 16
// would not fit under an admission limit of 8 and the backends would never turn ready.
import { describe, expect, it } from 'vitest';
import { type Outcome, send } from './support/client.js';
import { useHarness } from './support/harness.js';
import { harnessModel } from './support/models.js';
import { expectAllAlive, expectNoLeakedBlocks } from './support/platform-checks.js';
import { slowGenerate } from './support/slow-client.js';
import { sseTerminal } from './support/sse.js';

const model = harnessModel();

const CAPACITY = 16;
const harness = useHarness({
  backendEnv: { STRATA_MAX_NUM_SEQS: '4', STRATA_MAX_QUEUED: '4' },
});

describe.skipIf(!model.path)(`overload at 10x capacity${model.skipped}`, () => {
  it('sheds with 429 + Retry-After, finishes everything it accepted, and recovers', async () => {
    const clients = CAPACITY * 10;
    const until = Date.now() + 30_000;
    const outcomes: Outcome[] = [];
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        for (let i = 0; Date.now() < until; i++) {
          const o = await send(harness().entryUrl, harness().apiKey, {
            endpoint: i % 3 === 2 ? 'completions' : 'generate',
            stream: i % 2 === 0,
            body: { max_tokens: 64, ignore_eos: true },
            session: `overload-${c}`,
          });
          outcomes.push(o);
          // A shed client waits a little before trying again, as Retry-After asks (capped: the
          // test wants pressure, not politeness).
          if (o.status === 429) await new Promise((r) => setTimeout(r, 50));
        }
      }),
    );
    const accepted = outcomes.filter((o) => o.status === 200);
    const shed = outcomes.filter((o) => o.status === 429);
    expect(
      outcomes.filter((o) => o.status !== 200 && o.status !== 429).map((o) => [o.status, o.errorCode]),
    ).toEqual([]);
    expect(shed.length).toBeGreaterThan(0);
    expect(shed.filter((o) => o.retryAfter === null)).toEqual([]);
    expect(accepted.length).toBeGreaterThan(0);
    // Everything accepted ran to the end.
    expect(accepted.filter((o) => o.terminal !== 'done')).toEqual([]);
    process.stdout.write(
      `overload: ${outcomes.length} requests in 30 s from ${clients} clients: ${accepted.length} served, ${shed.length} shed with 429\n`,
    );

    await expectNoLeakedBlocks(harness());
    const after = [];
    for (let i = 0; i < 10; i++)
      after.push(await send(harness().entryUrl, harness().apiKey, { stream: i % 2 === 0 }));
    expect(after.map((o) => [o.status, o.terminal])).toEqual(after.map(() => [200, 'done']));
    await expectAllAlive(harness());
  }, 180_000);
});

describe.skipIf(!model.path)(`slow clients${model.skipped}`, () => {
  it('get complete streams one byte at a time while others are served', async () => {
    const slow = Array.from({ length: 6 }, () =>
      slowGenerate(harness().entryUrl, harness().apiKey, {
        prompt: 'Once upon a time',
        max_tokens: 300,
        ignore_eos: true,
        stream: true,
      }),
    );
    // One at a time: with six slow streams held, the admission limit leaves room for these.
    const fast = [];
    for (let i = 0; i < 10; i++) fast.push(await send(harness().entryUrl, harness().apiKey));
    expect(fast.map((o) => [o.status, o.terminal])).toEqual(fast.map(() => [200, 'done']));
    const results = await Promise.all(slow);
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(sseTerminal(r.body)).toEqual({ terminal: 'done', tokens: 300 });
    }
    await expectNoLeakedBlocks(harness());
    await expectAllAlive(harness());
  }, 180_000);
});
