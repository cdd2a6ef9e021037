// How engine steps reach JS (strata::StepQueue in native/engine/runner, delivered by
// native/addon/engine_binding.cpp), through the raw addon on the real tinystories-656k
// weights: one delivery at a time, the next only after resumeSteps(), everything that
// accumulated meanwhile in one call, in order, nothing lost, and the engine paused once 64
// steps wait.
import { readdirSync, readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { loadNativeAddon, type NativeEngine, type NativeStep } from '../src/native.js';
import { modelPath, optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');

const PROMPT = Int32Array.from([1, 80, 147, 201, 282, 215, 286, 604, 10]);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (check()) return;
    await sleep(10);
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe.skipIf(!tiny.path)(`step delivery${tiny.skipped}`, () => {
  let native: NativeEngine | undefined;
  const deliveries: NativeStep[][] = [];
  afterEach(async () => {
    await native?.close();
    deliveries.length = 0;
  });

  const load = async () => {
    native = await loadNativeAddon().loadEngine(
      { modelDir: modelPath('tinystories-656k'), numBlocks: 64, threads: 1 },
      (steps) => deliveries.push(steps),
    );
    return native;
  };
  const tokens = () => deliveries.flat().flatMap((s) => Array.from(s.tokens));
  const finished = () => deliveries.flat().some((s) => s.finish.some((f) => f !== 0));

  it('waits for resumeSteps(), then hands over every step that accumulated, in order', async () => {
    const engine = await load();
    const params = { temperature: 0, maxTokens: 20, ignoreEos: true };
    const tokensOf = (id: number) =>
      deliveries.flat().flatMap((s) => Array.from(s.tokens).filter((_, i) => s.ids[i] === id));
    engine.submit({ id: 1, prompt: PROMPT, params });
    await until(() => deliveries.length === 1, 'the first delivery');
    // JS has not asked for more: the engine finishes both requests, and nothing else arrives.
    engine.submit({ id: 2, prompt: PROMPT, params });
    await until(() => engine.stats().finishedLength === 2, 'both requests to finish');
    await sleep(50);
    expect(deliveries).toHaveLength(1);

    engine.resumeSteps();
    await until(() => deliveries.length === 2, 'the second delivery');
    const second = deliveries[1] ?? [];
    // Request 2 started after the first delivery: all its 20 steps came in this one call.
    expect(second.flatMap((s) => Array.from(s.ids)).filter((id) => id === 2)).toHaveLength(20);
    expect(tokensOf(1)).toHaveLength(20);
    expect(tokensOf(2)).toEqual(tokensOf(1)); // greedy, same prompt: nothing lost or reordered
    const finishes = deliveries.flat().flatMap((s) => Array.from(s.finish).filter((f) => f !== 0));
    expect(finishes).toEqual([2, 2]); // length, once per request
    engine.resumeSteps(); // nothing waits: the next step would be delivered at once
    await sleep(20);
    expect(deliveries).toHaveLength(2);

    // Resumed after every delivery, as the Engine class does: the same tokens again.
    const resume = setInterval(() => engine.resumeSteps(), 1);
    engine.submit({ id: 3, prompt: PROMPT, params });
    await until(() => tokensOf(3).length === 20, 'the third request');
    clearInterval(resume);
    expect(tokensOf(3)).toEqual(tokensOf(1));
  });

  it.runIf(process.platform === 'linux')('runs its loop on a thread named strata-engine', async () => {
    await load();
    const names = readdirSync('/proc/self/task').map((tid) =>
      readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim(),
    );
    expect(names.filter((n) => n === 'strata-engine')).toHaveLength(1);
  });

  it('pauses the engine while 64 steps wait for JS, and loses none of them', async () => {
    const engine = await load();
    engine.submit({ id: 7, prompt: PROMPT, params: { temperature: 0, maxTokens: 200, ignoreEos: true } });
    await until(() => deliveries.length === 1, 'the first delivery');
    let steps = -1;
    await until(() => {
      const now = engine.stats().numSteps;
      const settled = now === steps;
      steps = now;
      return settled;
    }, 'the engine to pause');
    // Those delivered, 64 waiting, and the one computed but not yet queued: far from all 200.
    expect(steps).toBeLessThanOrEqual((deliveries[0]?.length ?? 0) + 64 + 1);
    expect(engine.stats().finishedLength).toBe(0);
    expect(engine.stats().numRunning).toBe(1);

    while (!finished()) {
      engine.resumeSteps();
      await sleep(5);
    }
    expect(deliveries.slice(1).some((d) => d.length === 64)).toBe(true);
    expect(tokens()).toHaveLength(200);
  });
});
