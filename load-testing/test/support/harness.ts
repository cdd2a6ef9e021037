// One harness per test file: started before the file's tests (it may take up to three minutes:
// builds, Redis, two backends loading their model) and stopped after them.
import { afterAll, beforeAll } from 'vitest';
import { type Harness, type HarnessOptions, startHarness } from '../../src/harness.js';

/** Starts a harness in beforeAll and stops it in afterAll; the getter returns it once started. */
export function useHarness(options?: HarnessOptions): () => Harness {
  let harness: Harness | undefined;
  beforeAll(async () => {
    harness = await startHarness(options);
  }, 180_000);
  afterAll(async () => {
    await harness?.stop();
  });
  return () => {
    if (harness === undefined) throw new Error('the harness has not started');
    return harness;
  };
}
