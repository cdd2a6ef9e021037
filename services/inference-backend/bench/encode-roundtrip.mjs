// Times Tokenizer.encodeIds on the main thread and through the encoding worker, for prompts of a
// few sizes (p50/p90 of the latency, in ms), to see what the worker's round trip costs.
//
//   node bench/encode-roundtrip.mjs [MODEL]
//
// Run from services/inference-backend after `pnpm run build`; MODEL defaults to
// $STRATA_MODELS_DIR/tinystories-656k.
import path from 'node:path';
import { loadModelFiles } from '../dist/model/model-files.js';
import { Tokenizer } from '../dist/model/tokenizer.js';

const model = process.argv[2] ?? path.join(process.env.STRATA_MODELS_DIR ?? '', 'tinystories-656k');
const files = await loadModelFiles(model);
const inThread = await Tokenizer.open(files, { worker: false });
const inWorker = await Tokenizer.open(files);
const sentence = 'Once upon a time, there was a little girl named Lily who liked to play. ';

async function time(tokenizer, text, n) {
  const ms = [];
  for (let i = 0; i < n; i++) {
    const started = performance.now();
    await tokenizer.encodeIds(text);
    ms.push(performance.now() - started);
  }
  ms.sort((a, b) => a - b);
  return { p50: +ms[n >> 1].toFixed(3), p90: +ms[Math.floor(n * 0.9)].toFixed(3) };
}

for (const chars of [80, 1024, 4096, 16384, 65536]) {
  const text = sentence.repeat(Math.ceil(chars / sentence.length)).slice(0, chars);
  const n = chars > 10_000 ? 50 : 400;
  await time(inThread, text, 20); // warm up both paths
  await time(inWorker, text, 20);
  const tokens = (await inThread.encodeIds(text)).length;
  console.log(
    JSON.stringify({
      chars,
      tokens,
      mainThread: await time(inThread, text, n),
      worker: await time(inWorker, text, n),
    }),
  );
}
await inWorker.close();
