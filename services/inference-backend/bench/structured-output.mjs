#!/usr/bin/env node
// Benchmark: what structured output costs. The engine (through N-API, as the service drives it)
// on SmolLM2-135M-Instruct Q4_1 (49,152-token vocabulary), the same requests with and without
// a JSON-schema constraint, in interleaved rounds at 1 and 64 concurrent sequences. Reports
// output tokens/s of each and their ratio, llguidance's time per mask (computed on the engine's
// mask thread while the forward pass runs), how long steps waited for masks after the forward,
// and the time to compile the schema.
//   node bench/structured-output.mjs [--model FILE] [--batches 1,64] [--rounds 3] [--max-tokens 64]
// Build first (pnpm run build). Prints a table; writes docs/benchmarks/structured-output.json.
import { writeFileSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { defaultGguf, pkg, repo } from './paths.mjs';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: defaultGguf },
    batches: { type: 'string', default: '1,64' },
    rounds: { type: 'string', default: '3' },
    'max-tokens': { type: 'string', default: '64' },
  },
});
const batches = values.batches.split(',').map(Number);
const rounds = Number(values.rounds);
const maxTokens = Number(values['max-tokens']);

const { Engine } = await import(join(pkg, 'dist/engine/engine.js'));
const { loadModelFiles } = await import(join(pkg, 'dist/model/model-files.js'));
const { Tokenizer } = await import(join(pkg, 'dist/model/tokenizer.js'));
const { readFile } = await import('node:fs/promises');

// People as a JSON array of at least 10: no output can end before max_tokens (64 by default), so
// both arms generate the same number of tokens per sequence.
const schema = JSON.stringify({
  type: 'array',
  minItems: 10,
  items: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 16 },
      age: { type: 'integer', minimum: 0, maximum: 120 },
      city: { type: 'string', maxLength: 16 },
    },
    required: ['name', 'age', 'city'],
    additionalProperties: false,
  },
});

const files = await loadModelFiles(values.model);
const tokenizer = await Tokenizer.open(files, { worker: false });
const engine = await Engine.load({
  modelDir: values.model,
  threads: availableParallelism(),
  maxNumSeqs: Math.max(...batches),
  maxModelLen: 512,
});
const tokenizerJson =
  files.tokenizer.kind === 'json' ? files.tokenizer.json : await readFile(files.tokenizer.path, 'utf8');
const grammar = await engine.loadGrammar(tokenizerJson, tokenizer.eosTokenIds);
const prompt = await tokenizer.encodeIds(
  '<|im_start|>user\nList some people with their age and city as JSON.<|im_end|>\n<|im_start|>assistant\n',
  { addSpecialTokens: false },
);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const spread = (xs) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });

async function round(batch, constrained) {
  const compile = [];
  const constraints = [];
  if (constrained) {
    for (let i = 0; i < batch; i++) {
      const c = await engine.compileConstraint('json_schema', schema);
      compile.push(c.compileSeconds * 1e3);
      constraints.push(c);
    }
  }
  const before = engine.stats();
  const start = performance.now();
  let tokens = 0;
  await Promise.all(
    Array.from({ length: batch }, async (_, i) => {
      const params = { temperature: 1, seed: i, maxTokens, ignoreEos: !constrained };
      const options = constrained ? { constraint: constraints[i] } : {};
      for await (const event of engine.generate(prompt, params, options))
        if (event.token !== undefined) tokens++;
    }),
  );
  const seconds = (performance.now() - start) / 1e3;
  const after = engine.stats();
  const masks = after.constraintMasks - before.constraintMasks;
  const steps = after.numSteps - before.numSteps;
  return {
    tokensPerSecond: tokens / seconds,
    tokens,
    steps,
    maskUs: masks > 0 ? ((after.constraintMaskSeconds - before.constraintMaskSeconds) / masks) * 1e6 : 0,
    maskMsPerStep:
      steps > 0 ? ((after.constraintMaskSeconds - before.constraintMaskSeconds) / steps) * 1e3 : 0,
    waitMsPerStep:
      steps > 0 ? ((after.constraintWaitSeconds - before.constraintWaitSeconds) / steps) * 1e3 : 0,
    compileMs: compile.length > 0 ? median(compile) : 0,
    errors: after.constraintErrors - before.constraintErrors,
  };
}

await round(1, false); // warm the caches and the mask thread
await round(1, true);
const results = [];
for (const batch of batches) {
  const plain = [];
  const constrained = [];
  for (let r = 0; r < rounds; r++) {
    plain.push(await round(batch, false));
    constrained.push(await round(batch, true));
  }
  const ratio = constrained.map((c, i) => c.tokensPerSecond / plain[i].tokensPerSecond);
  results.push({
    batch,
    plain_tokens_per_s: spread(plain.map((p) => p.tokensPerSecond)),
    constrained_tokens_per_s: spread(constrained.map((c) => c.tokensPerSecond)),
    ratio: spread(ratio),
    mask_us_per_token: spread(constrained.map((c) => c.maskUs)),
    mask_ms_per_step: spread(constrained.map((c) => c.maskMsPerStep)),
    wait_ms_per_step: spread(constrained.map((c) => c.waitMsPerStep)),
    compile_ms: spread(constrained.map((c) => c.compileMs)),
    constrained_tokens: constrained.map((c) => c.tokens),
    constraint_errors: constrained.reduce((n, c) => n + c.errors, 0),
  });
}
await engine.close();
await tokenizer.close();

const f = (x) => x.toFixed(x >= 100 ? 0 : x >= 10 ? 1 : 2);
const range = (s) => `${f(s.median)} (${f(s.min)}-${f(s.max)})`;
console.log(
  `structured output on ${files.name ?? values.model}, ${rounds} interleaved rounds, ${maxTokens} tokens`,
);
console.log(
  '| seqs | plain tok/s | constrained tok/s | ratio | mask us/token | mask ms/step | wait ms/step | compile ms |',
);
console.log('|---|---|---|---|---|---|---|---|');
for (const r of results) {
  console.log(
    `| ${r.batch} | ${range(r.plain_tokens_per_s)} | ${range(r.constrained_tokens_per_s)} | ${range(r.ratio)} | ` +
      `${range(r.mask_us_per_token)} | ${range(r.mask_ms_per_step)} | ${range(r.wait_ms_per_step)} | ${range(r.compile_ms)} |`,
  );
}
const out = {
  command: 'node services/inference-backend/bench/structured-output.mjs',
  date: new Date().toISOString(),
  machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: availableParallelism() },
  model: 'SmolLM2-135M-Instruct Q4_1 (vocabulary 49,152)',
  engine: `${engine.info.backend} (${engine.info.kernelIsa}), ${engine.info.threads} threads`,
  grammar: grammar.version,
  grammar_load_seconds: grammar.seconds,
  schema: JSON.parse(schema),
  rounds,
  max_tokens: maxTokens,
  results,
};
writeFileSync(
  join(repo, 'docs', 'benchmarks', 'structured-output.json'),
  `${JSON.stringify(out, null, 2)}\n`,
);
process.exit(0);
