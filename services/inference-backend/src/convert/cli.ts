#!/usr/bin/env node
// Checkpoint converters, for people:
//   node dist/convert/cli.js llama2c --checkpoint stories260K.bin --tokenizer tok512.model --out DIR
//   node dist/convert/cli.js sentencepiece --model tokenizer.model --out DIR [--max-length N]
// The second writes only tokenizer.json and tokenizer_config.json. Prints one line per step and what
// it wrote; exits 2 on bad usage, 1 on a failed conversion.

import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { ModelError } from '../model/errors.js';
import { buildHfTokenizer } from './hf-tokenizer.js';
import { convertLlama2c } from './llama2c.js';
import { parseSentencePieceModel } from './sentencepiece-model.js';

const USAGE = `usage:
  cli.js llama2c --checkpoint FILE.bin --tokenizer FILE.model --out DIR
  cli.js sentencepiece --model FILE.model --out DIR [--max-length N]`;

export interface CliOutput {
  out: (line: string) => void;
  err: (line: string) => void;
}

/** Runs one command; returns the exit code. */
export async function runCli(argv: readonly string[], io: CliOutput): Promise<number> {
  const [command, ...rest] = argv;
  let values: Record<string, string | undefined>;
  try {
    ({ values } = parseArgs({
      args: rest,
      options: {
        checkpoint: { type: 'string' },
        tokenizer: { type: 'string' },
        model: { type: 'string' },
        out: { type: 'string' },
        'max-length': { type: 'string' },
      },
      strict: true,
    }));
  } catch (err) {
    io.err(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  try {
    if (command === 'llama2c' && values.checkpoint && values.tokenizer && values.out) {
      const result = await convertLlama2c({
        checkpoint: values.checkpoint,
        tokenizerModel: values.tokenizer,
        outDir: values.out,
        onProgress: io.out,
      });
      const total = result.files.reduce((n, f) => n + f.bytes, 0);
      io.out(`done: ${result.files.length} files, ${total} bytes in ${path.resolve(values.out)}`);
      return 0;
    }
    if (command === 'sentencepiece' && values.model && values.out) {
      const maxLength = Number(values['max-length'] ?? 4096);
      if (!Number.isInteger(maxLength) || maxLength <= 0) {
        io.err(`--max-length must be a positive integer\n${USAGE}`);
        return 2;
      }
      await writeTokenizerFiles(values.model, values.out, maxLength, io);
      return 0;
    }
  } catch (err) {
    const code = err instanceof ModelError ? `${err.code}: ` : '';
    io.err(`convert failed: ${code}${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
  io.err(USAGE);
  return 2;
}

async function writeTokenizerFiles(
  model: string,
  outDir: string,
  maxLength: number,
  io: CliOutput,
): Promise<void> {
  const spm = parseSentencePieceModel(await readFile(model), model);
  const files = buildHfTokenizer(spm, { modelMaxLength: maxLength });
  await mkdir(outDir, { recursive: true });
  for (const [name, json] of [
    ['tokenizer.json', files.tokenizer],
    ['tokenizer_config.json', files.tokenizerConfig],
  ] as const) {
    const file = path.resolve(outDir, name);
    await writeFile(file, `${JSON.stringify(json, null, 2)}\n`);
    io.out(`wrote ${file} (${(await stat(file)).size} bytes)`);
  }
}

const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  const io: CliOutput = {
    out: (line) => void process.stdout.write(`${line}\n`),
    err: (line) => void process.stderr.write(`${line}\n`),
  };
  process.exitCode = await runCli(process.argv.slice(2), io);
}
