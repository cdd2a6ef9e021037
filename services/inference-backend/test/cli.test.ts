// strata-engine as a user runs it: a real process on the real model.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { modelPath, optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');

const cli = join(import.meta.dirname, '..', 'dist', 'cli', 'strata-engine.js');
const run = (...args: string[]) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 60_000 });

describe.skipIf(!tiny.path)(`strata-engine${tiny.skipped}`, () => {
  it('generates text after the prompt and reports timing', () => {
    const model = modelPath('tinystories-656k');
    const r = run(
      'generate',
      '--model',
      model,
      '--prompt',
      'Once upon a time',
      '--max-tokens',
      '20',
      '--temperature',
      '0',
      '--ignore-eos',
    );
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.startsWith('Once upon a time')).toBe(true);
    expect(r.stdout.length).toBeGreaterThan('Once upon a time'.length + 20);
    expect(r.stderr).toMatch(/prompt \d+ tokens, TTFT [\d.]+ ms, 20 tokens at \d+ tokens\/s, finish: length/);
  });

  it('is deterministic under greedy decoding', () => {
    const model = modelPath('tinystories-656k');
    const args = [
      'generate',
      '--model',
      model,
      '--prompt',
      'The cat',
      '--max-tokens',
      '30',
      '--temperature',
      '0',
    ];
    expect(run(...args).stdout).toBe(run(...args).stdout);
  });

  it('prints the loaded model and engine settings', () => {
    const r = run('info', '--model', modelPath('tinystories-656k'));
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({
      model: { architecture: 'LlamaForCausalLM', vocabSize: 2048 },
      backend: 'cpu',
    });
  });

  it('exits 2 with usage on bad options and 1 with the error code on a bad model', () => {
    const bad = run('generate', '--model', modelPath('tinystories-656k'), '--prompt', 'x', '--top-p', '2');
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain('--top-p must be in (0, 1], got 2');
    expect(bad.stderr).toContain('usage:');
    expect(run('frobnicate').status).toBe(2);
    const missing = run('generate', '--model', '/nonexistent/model', '--prompt', 'x');
    expect(missing.status).toBe(1);
    expect(missing.stderr).toContain(
      'strata-engine: STRATA_MODEL_CONFIG: model path /nonexistent/model does not exist',
    );
  });
});
