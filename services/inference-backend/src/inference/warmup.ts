// Representative traffic before readiness: several prompt lengths, alone and in a batch, so
// that code paths, thread pools and allocations are warm when the first client arrives. Its
// requests are marked `warmup`: the vllm:* request metrics leave them out, and they are counted
// under strata_backend_warmup_* instead (observability/engine-metrics.ts).
import type { Logger } from '@strata/common';
import type { InferenceRuntime } from './runtime.js';

export interface WarmupReport {
  requests: number;
  seconds: number;
}

export async function warmUp(runtime: InferenceRuntime, logger: Logger): Promise<WarmupReport> {
  const started = performance.now();
  const vocab = runtime.engine.info.model.vocabSize;
  const longest = Math.max(8, Math.min(512, Math.floor(runtime.maxModelLen / 2)));
  const lengths = [...new Set([8, 64, longest].filter((n) => n <= longest))];
  const prompt = (length: number, salt: number) =>
    Array.from({ length }, (_, i) => 3 + ((i * 131 + salt * 977) % Math.max(1, vocab - 3)));
  let requests = 0;
  const run = async (ids: number[]) => {
    requests++;
    for await (const _ of await runtime.start({
      prompt: ids,
      params: { maxTokens: 8, ignoreEos: true, temperature: 0 },
      warmup: true,
    })) {
      // consume: the point is to run the engine
    }
  };
  for (const length of lengths) await run(prompt(length, length)); // alone
  // Batches never exceed what the backend admits, or warmup would be refused by its own 429.
  for (const batch of new Set([4, 16].map((n) => Math.min(n, runtime.capacity)))) {
    await Promise.all(
      Array.from({ length: batch }, (_, i) => run(prompt(lengths[i % lengths.length] ?? 8, batch * 100 + i))),
    );
  }
  const report = { requests, seconds: (performance.now() - started) / 1e3 };
  logger.info({ warmup: report, prompt_lengths: lengths }, 'warmup done');
  return report;
}
