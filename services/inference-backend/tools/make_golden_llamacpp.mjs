#!/usr/bin/env node
// Makes test/golden/smollm2-q4_1-llamacpp.json: llama.cpp's own greedy tokens on the default
// model (SmolLM2-135M-Instruct Q4_1 GGUF), the reference the engine must equal token for token.
//   node services/inference-backend/tools/make_golden_llamacpp.mjs [--model FILE.gguf]
// (after `scripts/strata setup`, which builds dist/ and fetches the model; run from the repo root).
// llama.cpp comes from the npm registry: node-llama-cpp@3.22.1 and its prebuilt CPU build
// (@node-llama-cpp/linux-x64), installed once into .toolchain/node-llama-cpp/.
//
// Chat prompts are rendered with the GGUF's own template by Strata's ChatTemplate (the test
// checks that rendering too) and tokenized by llama.cpp, special tokens parsed; raw prompts
// are tokenized by llama.cpp as plain text. Settings chosen to match the engine's numerics:
// K and V cache in F32 (the engine keeps an fp32 KV cache; llama.cpp's default is F16),
// flash attention off, one sequence, greedy; generation stops at llama.cpp's end-of-generation
// tokens (not listed in output_ids; stopped_at_eog says so) or after 48 tokens.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { defaultGguf, pkg, repo } from '../bench/paths.mjs';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: defaultGguf },
    tokens: { type: 'string', default: '48' },
  },
});
const NODE_LLAMA_CPP = 'node-llama-cpp@3.22.1';
const maxTokens = Number(values.tokens);

const CHATS = [
  [{ role: 'user', content: 'What is the capital of France?' }],
  [{ role: 'user', content: 'List three fruits that are red.' }],
  [
    { role: 'user', content: 'Hi! Who are you?' },
    { role: 'assistant', content: 'I am a helpful assistant. How can I help you today?' },
    { role: 'user', content: 'Tell me a fun fact about octopuses.' },
  ],
  [
    { role: 'system', content: 'You are a pirate. Answer like one.' },
    { role: 'user', content: 'How is the weather today?' },
  ],
  [{ role: 'user', content: 'Write a Python function that adds two numbers.' }],
];
const RAW = ['Once upon a time, in a small village by the sea,', 'The three primary colors are'];

function ensureNodeLlamaCpp() {
  const prefix = join(repo, '.toolchain', 'node-llama-cpp');
  if (!existsSync(join(prefix, 'node_modules', 'node-llama-cpp', 'package.json'))) {
    console.error(
      `[golden] installing ${NODE_LLAMA_CPP} (prebuilt llama.cpp, from the npm registry) into .toolchain/node-llama-cpp`,
    );
    execFileSync(
      'npm',
      ['install', '--prefix', prefix, '--no-audit', '--no-fund', '--ignore-scripts', NODE_LLAMA_CPP],
      {
        stdio: 'inherit',
      },
    );
  }
  return join(prefix, 'node_modules', 'node-llama-cpp', 'dist', 'index.js');
}

const { getLlama } = await import(pathToFileURL(ensureNodeLlamaCpp()).href);
const { loadModelFiles } = await import(join(pkg, 'dist/model/model-files.js'));
const { ChatTemplate } = await import(join(pkg, 'dist/model/chat-template.js'));

const modelPath = resolve(values.model);
const files = await loadModelFiles(modelPath);
const template = ChatTemplate.fromModelFiles(files);
const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
const model = await llama.loadModel({ modelPath });
const settings = {
  kv_cache_type: 'F32',
  flash_attention: false,
  threads: 1,
  context_size: 1024,
  sampling: 'greedy',
  max_tokens: maxTokens,
};
const context = await model.createContext({
  contextSize: settings.context_size,
  threads: settings.threads,
  flashAttention: false,
  experimentalKvCacheKeyType: 'F32',
  experimentalKvCacheValueType: 'F32',
});

async function greedy(text) {
  const promptIds = model.tokenize(text, true);
  const sequence = context.getSequence();
  const ids = [];
  // node-llama-cpp's evaluate() ends by itself at an end-of-generation token, without yielding it.
  for await (const token of sequence.evaluate(promptIds, { temperature: 0 })) {
    ids.push(token);
    if (ids.length >= maxTokens) break;
  }
  const stoppedAtEog = ids.length < maxTokens;
  sequence.dispose();
  return {
    prompt_ids: promptIds,
    output_ids: ids,
    stopped_at_eog: stoppedAtEog,
    output_text: model.detokenize(ids),
  };
}

const cases = [];
for (const messages of CHATS) {
  const text = template.render(messages, { addGenerationPrompt: true });
  cases.push({ kind: 'chat', messages, text, ...(await greedy(text)) });
}
for (const text of RAW) cases.push({ kind: 'raw', text, ...(await greedy(text)) });
await context.dispose();
await model.dispose();

const sha256 = createHash('sha256').update(readFileSync(modelPath)).digest('hex');
const out = {
  command: 'node services/inference-backend/tools/make_golden_llamacpp.mjs',
  llama_cpp: `${NODE_LLAMA_CPP} (llama.cpp release ${JSON.parse(readFileSync(join(dirname(ensureNodeLlamaCpp()), '..', 'llama', 'llama.cpp.info.json'), 'utf8')).tag}, prebuilt CPU build)`,
  model: basename(modelPath),
  model_sha256: sha256,
  settings,
  cases,
};
const target = join(pkg, 'test', 'golden', 'smollm2-q4_1-llamacpp.json');
writeFileSync(target, `${JSON.stringify(out, null, 1)}\n`);
for (const c of cases) {
  console.log(
    `${c.kind.padEnd(4)} prompt ${String(c.prompt_ids.length).padStart(3)} tokens -> ${c.output_ids.length}${c.stopped_at_eog ? ' (end of turn)' : ''}: ${JSON.stringify(c.output_text).slice(0, 70)}`,
  );
}
console.log(`wrote ${target}`);
