// Clients that misbehave: 1,000 that disconnect at random points of their requests, and bad
// inputs of every kind. Each must leave the platform whole: no KV block held, no process down,
// and bad input answered with a 4xx that names the problem.
import { describe, expect, it } from 'vitest';
import { authHeaders } from '../src/harness.js';
import { type Outcome, send } from './support/client.js';
import { useHarness } from './support/harness.js';
import { harnessModel } from './support/models.js';
import { expectAllAlive, expectNoLeakedBlocks } from './support/platform-checks.js';

const model = harnessModel();

const harness = useHarness();

// Deterministic pseudo-random points (xorshift), so a failure can be replayed.
function random(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

describe.skipIf(!model.path)(`1,000 clients disconnecting at random points${model.skipped}`, () => {
  it('frees every KV block and keeps every process up', async () => {
    const rand = random(20261121);
    const total = 1_000;
    const concurrency = 50;
    const outcomes: Outcome[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < total) {
          const n = next++;
          const controller = new AbortController();
          // Half leave after a random time (before or after the headers), half after a
          // random number of events.
          const byEvents = rand() < 0.5;
          const afterEvents = Math.floor(rand() * 40);
          const afterMs = Math.floor(rand() * 30);
          let events = 0;
          const timer = byEvents ? undefined : setTimeout(() => controller.abort(), afterMs);
          const outcome = await send(harness().entryUrl, harness().apiKey, {
            endpoint: n % 5 === 4 ? 'completions' : 'generate',
            stream: n % 7 !== 6,
            body: { max_tokens: 16 + Math.floor(rand() * 300), ignore_eos: true },
            session: `leave-${n % 20}`,
            signal: controller.signal,
            onEvent: () => {
              if (byEvents && ++events >= afterEvents) controller.abort();
            },
          });
          clearTimeout(timer);
          outcomes.push(outcome);
        }
      }),
    );
    expect(outcomes).toHaveLength(total);
    // Each request either was left by its client or ended properly; none failed otherwise.
    const unexplained = outcomes.filter((o) => !o.aborted && !(o.status === 200 && o.terminal === 'done'));
    expect(unexplained).toEqual([]);
    const aborted = outcomes.filter((o) => o.aborted).length;
    expect(aborted).toBeGreaterThan(total / 4);
    process.stdout.write(`disconnects: ${aborted} of ${total} clients left mid-request\n`);

    await expectNoLeakedBlocks(harness());
    const after = await send(harness().entryUrl, harness().apiKey);
    expect([after.status, after.terminal]).toEqual([200, 'done']);
    await expectAllAlive(harness());
  }, 240_000);
});

interface BadInput {
  name: string;
  path?: string;
  contentType?: string;
  body: string | Buffer;
}

const longPrompt = 'once upon a time '.repeat(2_000);
const BAD_INPUTS: BadInput[] = [
  { name: 'malformed JSON', body: '{"prompt": "Once upon' },
  { name: 'empty body', body: '' },
  { name: 'JSON that is not an object', body: '[1, 2, 3]' },
  { name: 'no prompt', body: '{"max_tokens": 8}' },
  { name: 'prompt of the wrong type', body: '{"prompt": {"text": "hi"}}' },
  { name: 'negative max_tokens', body: '{"prompt": "hi", "max_tokens": -1}' },
  { name: 'absurd max_tokens', body: '{"prompt": "hi", "max_tokens": 100000000}' },
  { name: 'temperature as text', body: '{"prompt": "hi", "temperature": "hot"}' },
  { name: 'NaN-like top_p', body: '{"prompt": "hi", "top_p": 7}' },
  { name: 'stream as text', body: '{"prompt": "hi", "stream": "yes"}' },
  { name: 'prompt longer than the context', body: JSON.stringify({ prompt: longPrompt, max_tokens: 8 }) },
  { name: 'unknown model', body: '{"prompt": "hi", "model": "no-such-model"}' },
  { name: 'wrong content type', contentType: 'text/plain', body: '{"prompt": "hi"}' },
  { name: 'invalid UTF-8', body: Buffer.from([0x7b, 0x22, 0x70, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]) },
  { name: 'a 3 MB body', body: JSON.stringify({ prompt: 'x'.repeat(3_000_000) }) },
  { name: 'chat without messages', path: '/v1/chat/completions', body: '{"max_tokens": 8}' },
  {
    name: 'chat message of the wrong shape',
    path: '/v1/chat/completions',
    body: '{"messages": [{"role": 7}]}',
  },
  { name: 'completions with a bad stop', path: '/v1/completions', body: '{"prompt": "hi", "stop": 42}' },
];

describe.skipIf(!model.path)(`bad inputs${model.skipped}`, () => {
  it.each(BAD_INPUTS)('$name gets a 4xx naming the problem', async ({ path, contentType, body }) => {
    const res = await fetch(`${harness().entryUrl}${path ?? '/v1/generate'}`, {
      method: 'POST',
      headers: { 'content-type': contentType ?? 'application/json', ...authHeaders(harness().apiKey) },
      body,
    });
    const json = (await res.json()) as { error?: { code?: string; message?: string } };
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    expect(json.error?.code).toMatch(/^STRATA_[A-Z_]+$/);
    expect(json.error?.message?.length).toBeGreaterThan(0);
  });

  it('leaves every process up and serving', async () => {
    const ok = await send(harness().entryUrl, harness().apiKey);
    expect([ok.status, ok.terminal]).toEqual([200, 'done']);
    await expectNoLeakedBlocks(harness());
    await expectAllAlive(harness());
  });
});
