// One engine, several event loops (strata::StepRouter, attachEngine): an engine attached by a
// share() key submits with its own ids and streams only its own requests, on its own thread;
// closing it aborts what it still runs; closing the engine that loaded the model fails the
// attached engines' streams with STRATA_ENGINE_CLOSED. On the real tinystories-656k weights.
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine, EngineError } from '../src/engine/engine.js';
import { loadNativeAddon } from '../src/native.js';
import { modelPath, optionalModel } from './support/models.js';
import { collect, tokensOf } from './support/token-streams.js';

const tiny = optionalModel('tinystories-656k');

const PROMPT = [1, 80, 147, 201, 282, 215, 286, 604, 10];
const GREEDY = { temperature: 0, maxTokens: 24, ignoreEos: true };

// A worker thread that attaches to `key` through the raw addon, runs one greedy request and
// posts what its own onSteps received, with the thread it ran on.
const WORKER = `
const { parentPort, workerData, threadId } = require('node:worker_threads');
const addon = require(workerData.addon);
const received = [];
let native;
native = addon.attachEngine(workerData.key, (steps) => {
  for (const s of steps) {
    for (let i = 0; i < s.ids.length; i++) received.push({ id: s.ids[i], token: s.tokens[i], finish: s.finish[i], threadId });
  }
  setImmediate(() => native.resumeSteps());
  if (received.some((r) => r.finish !== 0)) native.close().then(() => parentPort.postMessage(received));
});
native.submit({ id: 1, prompt: Int32Array.from(workerData.prompt), params: workerData.params });
if (workerData.announce) parentPort.postMessage('submitted');
`;

/** Starts WORKER on `key` and resolves with its first message. */
async function runWorker(
  key: number,
  params: object,
  announce = false,
): Promise<{ worker: Worker; message: unknown }> {
  const addon =
    process.env.STRATA_NATIVE_ADDON ??
    new URL('../build/Release/strata_native.node', import.meta.url).pathname;
  const worker = new Worker(WORKER, {
    eval: true,
    workerData: { addon, key, prompt: PROMPT, params, announce },
  });
  const message = await new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return { worker, message };
}

describe.skipIf(!tiny.path)(`one engine, several event loops${tiny.skipped}`, () => {
  const open: Engine[] = [];
  afterEach(async () => {
    for (const e of open.reverse()) await e.close();
    open.length = 0;
  });
  const load = async () => {
    const engine = await Engine.load({ modelDir: modelPath('tinystories-656k'), numBlocks: 256, threads: 1 });
    open.push(engine);
    return engine;
  };

  it('an attached engine streams its own requests under its own ids, beside the loading one', async () => {
    const engine = await load();
    const attached = Engine.attach(engine.share());
    open.push(attached);
    expect(attached.info.model).toEqual(engine.info.model);
    // Both number their first request 1: no clash, and greedy decoding gives both the same tokens.
    const [mine, theirs] = await Promise.all([
      collect(engine.generate(PROMPT, GREEDY)),
      collect(attached.generate(PROMPT, GREEDY)),
    ]);
    expect(tokensOf(mine)).toHaveLength(24);
    expect(tokensOf(theirs)).toEqual(tokensOf(mine));
    expect(theirs.at(-1)?.finishReason).toBe('length');
    expect(engine.liveRequests).toBe(0);
    expect(attached.liveRequests).toBe(0);
  });

  it('delivers to a worker thread on its own event loop', async () => {
    const engine = await load();
    const expected = tokensOf(await collect(engine.generate(PROMPT, GREEDY)));
    const { worker, message } = await runWorker(engine.share(), GREEDY);
    const received = message as { id: number; token: number; finish: number; threadId: number }[];
    const threadId = worker.threadId;
    await worker.terminate();
    expect(threadId).toBeGreaterThan(0);
    expect(received.map((r) => r.token)).toEqual(expected);
    expect(new Set(received.map((r) => r.id))).toEqual(new Set([1]));
    expect(received.every((r) => r.threadId === threadId)).toBe(true);
    expect(received.at(-1)?.finish).toBe(2); // length
  });

  it('closing an attached engine aborts its live requests and leaves the others running', async () => {
    const engine = await load();
    const attached = Engine.attach(engine.share());
    const long = { temperature: 0, maxTokens: 400, ignoreEos: true };
    const theirs = attached.generate(PROMPT, long);
    const mine = collect(engine.generate(PROMPT, GREEDY));
    await theirs.next(); // running
    await attached.close();
    expect((await mine).at(-1)?.finishReason).toBe('length');
    for (let i = 0; i < 200 && engine.stats().finishedAbort < 1; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(engine.stats().finishedAbort).toBe(1);
    expect(engine.stats().numRunning).toBe(0);
    expect(() => attached.generate(PROMPT, GREEDY)).toThrow(/closed/);
  });

  it('a worker thread that ends without close() has its requests aborted', async () => {
    const engine = await load();
    const { worker } = await runWorker(
      engine.share(),
      { temperature: 0, maxTokens: 400, ignoreEos: true },
      true,
    );
    for (let i = 0; i < 200 && engine.stats().numRunning < 1; i++) await new Promise((r) => setTimeout(r, 5));
    await worker.terminate();
    for (let i = 0; i < 200 && engine.stats().finishedAbort < 1; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(engine.stats().finishedAbort).toBe(1);
    expect(engine.stats().numRunning).toBe(0);
    // The engine serves on.
    expect(tokensOf(await collect(engine.generate(PROMPT, GREEDY)))).toHaveLength(24);
  });

  it("closing the loading engine fails an attached engine's streams with STRATA_ENGINE_CLOSED", async () => {
    const engine = await load();
    const key = engine.share();
    const attached = Engine.attach(key);
    open.push(attached);
    const stream = attached.generate(PROMPT, { temperature: 0, maxTokens: 400, ignoreEos: true });
    await stream.next();
    open.splice(open.indexOf(engine), 1);
    await engine.close();
    const failure = await collect(stream).catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(EngineError);
    expect((failure as EngineError).code).toBe('STRATA_ENGINE_CLOSED');
    expect(() => attached.generate(PROMPT, GREEDY)).toThrow(EngineError);
    expect(() => Engine.attach(key)).toThrow(/closed/);
  });

  it('refuses a request id that is not a whole number of at most 47 bits', async () => {
    const engine = await load();
    const native = loadNativeAddon().attachEngine(engine.share(), () => {});
    try {
      for (const id of [-1, 1.5, 2 ** 47, Number.NaN]) {
        expect(() => native.submit({ id, prompt: Int32Array.from(PROMPT), params: GREEDY })).toThrow(
          /STRATA_INVALID_PARAM|request id must be a whole number/,
        );
      }
    } finally {
      await native.close();
    }
  });

  it('refuses a key nothing was shared under', () => {
    expect(() => Engine.attach(987654)).toThrow(EngineError);
    expect(() => loadNativeAddon().attachEngine(987654, () => {})).toThrow(/STRATA_ENGINE_CLOSED|no engine/);
  });
});
