#!/usr/bin/env node
// The engine from a terminal, for quick manual use and scripts:
//   strata-engine generate --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P]
//                          [--top-k K] [--min-p P] [--seed S] [--stop STR]... [--ignore-eos] [--threads N]
//   strata-engine info --model DIR
//   strata-engine convert llama2c --checkpoint FILE.bin --tokenizer FILE.model --out DIR
// generate streams the text to stdout and prints timing to stderr. Exit codes: 0 ok, 1 failed, 2 bad usage.
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { type CliOutput, runCli as runConvert } from '../convert/cli.js';
import { Engine, type SamplingParams } from '../engine/engine.js';
import { TextGenerator } from '../engine/text-generation.js';
import { Tokenizer } from '../model/tokenizer.js';

const USAGE = `usage:
  strata-engine generate --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P] [--top-k K]
                         [--min-p P] [--seed S] [--stop STR]... [--ignore-eos] [--threads N]
  strata-engine info --model DIR
  strata-engine convert llama2c --checkpoint FILE.bin --tokenizer FILE.model --out DIR`;

class UsageError extends Error {}

function numberOption(
  values: Record<string, unknown>,
  name: string,
  check: (n: number) => boolean,
  rule: string,
) {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n) || !check(n)) throw new UsageError(`--${name} must be ${rule}, got ${String(raw)}`);
  return n;
}

function parse(argv: readonly string[]) {
  const { values } = parseArgs({
    args: [...argv],
    strict: true,
    options: {
      model: { type: 'string' },
      prompt: { type: 'string' },
      'max-tokens': { type: 'string' },
      temperature: { type: 'string' },
      'top-p': { type: 'string' },
      'top-k': { type: 'string' },
      'min-p': { type: 'string' },
      seed: { type: 'string' },
      stop: { type: 'string', multiple: true },
      'ignore-eos': { type: 'boolean' },
      threads: { type: 'string' },
    },
  });
  if (!values.model) throw new UsageError('--model DIR is required');
  const int = (n: number) => Number.isInteger(n);
  const params: SamplingParams = {
    maxTokens: numberOption(values, 'max-tokens', (n) => int(n) && n >= 1, 'an integer >= 1') ?? 64,
  };
  const optional: [keyof SamplingParams, number | undefined][] = [
    ['temperature', numberOption(values, 'temperature', (n) => n >= 0, '>= 0')],
    ['topP', numberOption(values, 'top-p', (n) => n > 0 && n <= 1, 'in (0, 1]')],
    ['topK', numberOption(values, 'top-k', (n) => int(n) && n >= 0, 'an integer >= 0')],
    ['minP', numberOption(values, 'min-p', (n) => n >= 0 && n <= 1, 'in [0, 1]')],
    [
      'seed',
      numberOption(
        values,
        'seed',
        (n) => int(n) && n >= 0 && n <= Number.MAX_SAFE_INTEGER,
        'a non-negative integer',
      ),
    ],
  ];
  for (const [key, value] of optional) if (value !== undefined) Object.assign(params, { [key]: value });
  if (values['ignore-eos']) params.ignoreEos = true;
  const threads = numberOption(values, 'threads', (n) => int(n) && n >= 0, 'an integer >= 0');
  return { model: values.model, prompt: values.prompt, stop: values.stop ?? [], params, threads };
}

async function generate(
  argv: readonly string[],
  io: CliOutput,
  write: (text: string) => void,
): Promise<number> {
  const options = parse(argv);
  if (options.prompt === undefined) throw new UsageError('--prompt TEXT is required');
  const started = performance.now();
  // One after the other, so a bad model directory always fails the same way (config first).
  const engine = await Engine.load({
    modelDir: options.model,
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
  });
  let tokenizer: Tokenizer;
  try {
    tokenizer = await Tokenizer.load(options.model);
  } catch (err) {
    await engine.close();
    throw err;
  }
  const loaded = performance.now();
  try {
    const generator = new TextGenerator(engine, tokenizer);
    let firstToken = 0;
    write(options.prompt);
    for await (const event of generator.stream({
      prompt: options.prompt,
      params: options.params,
      stop: options.stop,
    })) {
      if (event.type === 'token' && event.index === 0) firstToken = performance.now();
      write(event.text);
      if (event.type === 'done') {
        const end = performance.now();
        const decodeSeconds = (end - firstToken) / 1e3;
        const rate = event.usage.outputTokens > 1 ? (event.usage.outputTokens - 1) / decodeSeconds : 0;
        write('\n');
        io.err(
          `[strata-engine] load ${(loaded - started).toFixed(0)} ms, prompt ${event.usage.inputTokens} tokens, ` +
            `TTFT ${(firstToken - loaded).toFixed(1)} ms, ${event.usage.outputTokens} tokens at ${rate.toFixed(0)} tokens/s, ` +
            `finish: ${event.finishReason}${event.stop !== undefined ? ` (stop ${JSON.stringify(event.stop)})` : ''}`,
        );
      }
    }
  } finally {
    await engine.close();
  }
  return 0;
}

async function info(argv: readonly string[], io: CliOutput): Promise<number> {
  const options = parse(argv);
  const engine = await Engine.load({ modelDir: options.model, numBlocks: 64 });
  io.out(JSON.stringify(engine.info, null, 2));
  await engine.close();
  return 0;
}

export async function runCli(
  argv: readonly string[],
  io: CliOutput,
  write: (text: string) => void,
): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === 'generate') return await generate(rest, io, write);
    if (command === 'info') return await info(rest, io);
    if (command === 'convert') return await runConvert(rest, io);
    throw new UsageError(command ? `unknown command ${command}` : 'a command is required');
  } catch (err) {
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      io.err(`${(err as Error).message}\n${USAGE}`);
      return 2;
    }
    const code = (err as { code?: unknown }).code;
    io.err(`strata-engine: ${typeof code === 'string' ? `${code}: ` : ''}${(err as Error).message}`);
    return 1;
  }
}

const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  process.exitCode = await runCli(
    process.argv.slice(2),
    {
      out: (line) => void process.stdout.write(`${line}\n`),
      err: (line) => void process.stderr.write(`${line}\n`),
    },
    (text) => void process.stdout.write(text),
  );
}
